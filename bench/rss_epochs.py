#!/usr/bin/python3
"""Resident memory over epochs: does a loader grow from epoch to epoch?

Writes --shards shards of 500 samples (a ~50 KB JPEG of noise, one of 16,
and a .cls) to a temporary directory, then iterates
WebDataset(shardshuffle=100).shuffle(1000).decode("rgb8").to_tuple("jpg", "cls").batched(32)
for --epochs epochs through --loader:
  persistent   torch DataLoader, 2 workers, persistent_workers=True
  fresh        torch DataLoader, 2 workers, new workers each epoch
  webloader    wds.WebLoader, 2 workers, persistent_workers=True
  native       wds.Loader(workers=2) (threads)
and prints each epoch's batch count and the VmRSS (MB) of the main process
and of the persistent workers, then the growth from epoch 5 to the last
(MB per epoch).

  bench/rss_epochs.py [--loader persistent] [--epochs 30] [--shards 8] [--build build]
"""

import argparse
import io
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def children(pid):
    kids = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            kids += [int(k) for k in f.read().split()]
    return sorted(kids)


def write_shards(directory, shards, wds):
    import numpy as np
    import PIL.Image

    rng = np.random.default_rng(0)
    jpegs = []
    for _ in range(16):
        out = io.BytesIO()
        PIL.Image.fromarray(rng.integers(0, 256, (232, 232, 3), dtype=np.uint8)).save(
            out, format="JPEG", quality=90)
        jpegs.append(out.getvalue())
    with wds.ShardWriter(os.path.join(directory, "train-%06d.tar"), maxcount=500,
                         verbose=0) as sink:
        for i in range(shards * 500):
            sink.write({"__key__": f"{i:06d}", "jpg": jpegs[i % 16], "cls": i % 10})
    return os.path.join(directory, f"train-{{000000..{shards - 1:06d}}}.tar")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loader", default="persistent",
                        choices=["persistent", "fresh", "webloader", "native"])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import torch
    import webdataset_cpp as wds

    with tempfile.TemporaryDirectory() as work:
        pattern = write_shards(work, args.shards, wds)
        dataset = (wds.WebDataset(pattern, shardshuffle=100).shuffle(1000).decode("rgb8")
                   .to_tuple("jpg", "cls").batched(32))
        if args.loader == "native":
            loader = wds.Loader(dataset, workers=2)
        elif args.loader == "webloader":
            loader = wds.WebLoader(dataset, batch_size=None, num_workers=2,
                                   persistent_workers=True)
        else:
            loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2,
                                                 persistent_workers=args.loader == "persistent")
        print(f"loader {args.loader}, {args.shards * 500} samples an epoch, torch "
              f"{torch.__version__}")
        main_rss = []
        for epoch in range(1, args.epochs + 1):
            batches = sum(1 for _ in loader)
            workers = [rss_mb(p) for p in children(os.getpid())]
            main_rss.append(rss_mb(os.getpid()))
            print(f"epoch {epoch:3d}: {batches} batches, main {main_rss[-1]:.1f} MB, workers "
                  + " ".join(f"{w:.1f}" for w in workers))
        if args.epochs > 5:
            slope = (main_rss[-1] - main_rss[4]) / (args.epochs - 5)
            print(f"main process: {slope:+.3f} MB per epoch from epoch 5 to {args.epochs}")


if __name__ == "__main__":
    main()
