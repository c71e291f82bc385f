#!/usr/bin/python3
"""What one rank of a large job spends before its first sample, with every
shard's count from one dataset index: read from a local file, or fetched
over HTTP from a server (the object store's place, here
python/tests/remote_server.py on 127.0.0.1).

  WebDataset()   makes the dataset: reads (fetches) and parses the index,
                 checks that it lists every shard (split=None then shares
                 out samples)
  plan_epoch     the last rank's epoch plan (the counts are cached by now):
                 the permutation, the sample-granular split, the list digest
                 that agreed_steps compares
  first sample   the first sample of that rank (its shard read from the
                 server in the remote case)

Every measurement runs in a fresh process (the counts are cached per
process); rounds alternate the modes. The shards are links to one small
shard of 20 samples. Usage:

  bench/index_startup.py [--shards 50000] [--ranks 4096] [--rounds 5] [--build build]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, os, sys, time
rank, ranks, pattern, index = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(ranks)
import webdataset_cpp as wds
t0 = time.perf_counter()
ds = wds.WebDataset(pattern, shardshuffle=100, seed=0, nodesplitter=wds.split_by_node,
                    dataset_index=index)
t1 = time.perf_counter()
plan = wds.plan_epoch(ds.batched(64), num_workers=8, rank=rank, world_size=ranks)
t2 = time.perf_counter()
sample = next(iter(ds))
t3 = time.perf_counter()
assert ds.pipeline[0].counts_known and plan.dataset_samples == plan.dataset_shards * 20
print(json.dumps({"make": t1 - t0, "plan": t2 - t1, "first": t3 - t2,
                  "samples": plan.samples}))
"""


def make_data(work, shards):
    sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
    import webdataset_cpp as wds

    base = os.path.join(work, "base.tar")
    with wds.TarWriter(base) as w:
        for i in range(20):
            w.write({"__key__": f"k{i:04d}", "cls": str(i).encode(), "txt": b"x" * 100})
    os.makedirs(os.path.join(work, "s"))
    names = [f"s/train-{i:06d}.tar" for i in range(shards)]
    for name in names:
        os.symlink(base, os.path.join(work, name))
    with open(os.path.join(work, "index.json"), "w") as f:
        json.dump({"__kind__": "wids-shard-index-v1", "wids_version": 1,
                   "shardlist": [{"url": n, "nsamples": 20} for n in names]}, f)
    return os.path.getsize(os.path.join(work, "index.json"))


def start_server(work):
    port_file = os.path.join(work, "port")
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "python", "tests",
                                                            "remote_server.py"), work, port_file])
    deadline = time.monotonic() + 20
    while not os.path.exists(port_file):
        assert server.poll() is None and time.monotonic() < deadline, "no server"
        time.sleep(0.02)
    time.sleep(0.05)
    with open(port_file) as f:
        return server, f"http://127.0.0.1:{int(f.read())}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=50000)
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(args.build), "python"))
    sys.path.insert(0, env["PYTHONPATH"])
    with tempfile.TemporaryDirectory() as work:
        index_bytes = make_data(work, args.shards)
        server, base = start_server(work)
        try:
            last = f"{args.shards - 1:06d}"
            modes = {
                "local index": (f"{work}/s/train-{{000000..{last}}}.tar",
                                f"{work}/index.json"),
                "remote index": (f"{base}/s/train-{{000000..{last}}}.tar", f"{base}/index.json"),
            }
            times = {mode: [] for mode in modes}
            for _ in range(args.rounds):
                for mode, (pattern, index) in modes.items():
                    out = subprocess.run([sys.executable, "-c", CHILD, str(args.ranks - 1),
                                          str(args.ranks), pattern, index], env=env,
                                         capture_output=True, text=True, check=True)
                    times[mode].append(json.loads(out.stdout.splitlines()[-1]))
        finally:
            server.terminate()
            server.wait()
    print(f"{args.shards} shards, index {index_bytes} bytes, rank {args.ranks - 1} of "
          f"{args.ranks}, {args.rounds} rounds; median (min-max) in ms")
    print("| index | WebDataset() | plan_epoch | first sample | samples of the rank |")
    print("|---|---|---|---|---|")
    for mode, runs in times.items():
        cells = []
        for key in ("make", "plan", "first"):
            values = [1e3 * r[key] for r in runs]
            cells.append(f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})")
        print(f"| {mode} | " + " | ".join(cells) + f" | {runs[0]['samples']} |")


if __name__ == "__main__":
    main()
