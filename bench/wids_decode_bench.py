#!/usr/bin/python3
"""Decoding in webdataset_cpp.wids.ShardListDataset: the reference's default
transformations ("numpy": PIL decodes each image into an array) against an
image spec of the streaming API ("rgb8": decoded natively), side by side in
one run, and, with --reference DIR (DIR/wids: the reference's wids), the
reference's "numpy" on the same shards.

The shards: --shards tars of --samples 500x375 JPEGs (quality 90, 4:2:0,
drawn with PIL: gradients and noise) and a .cls. Each round reads every
sample once in a uniformly random order through a fresh dataset (the page
cache warm); samples/s, medians over --rounds, reader order alternating.
Usage:

  bench/wids_decode_bench.py [--shards 4] [--samples 250] [--rounds 5]
                             [--reference DIR] [--build build]
"""

import argparse
import io
import os
import random
import statistics
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def jpeg(rng, width=500, height=375):
    import numpy as np
    import PIL.Image

    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * rng.uniform(0.2, 0.6) + y * rng.uniform(0.1, 0.4)) % 256,
                     (x * rng.uniform(0.1, 0.5)) % 256, (y * rng.uniform(0.2, 0.7)) % 256], -1)
    noise = np.random.default_rng(rng.randrange(1 << 30)).normal(0, 12, base.shape)
    pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    PIL.Image.fromarray(pixels).save(out, "JPEG", quality=90)
    return out.getvalue()


def write_shards(directory, shards, samples):
    rng = random.Random(0)
    descriptors = []
    for s in range(shards):
        path = os.path.join(directory, f"shard-{s:06d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(samples):
                for name, data in ((f"{s}_{i:06d}.jpg", jpeg(rng)),
                                   (f"{s}_{i:06d}.cls", str(i % 1000).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        descriptors.append({"url": path, "nsamples": samples})
    return descriptors


def measure(module, descriptors, transformations, seed, cache):
    dataset = module.ShardListDataset(descriptors, transformations=transformations,
                                      cache_dir=cache, lru_size=len(descriptors))
    order = list(range(len(dataset)))
    random.Random(seed).shuffle(order)
    dataset[order[0]]  # every reader's first open out of the clock
    total = 0
    t0 = time.perf_counter()
    for i in order:
        image = dataset[i][".jpg"]
        total += int(image[0, 0, 0])
    return len(order) / (time.perf_counter() - t0), total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--samples", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reference", help="a directory holding the reference's wids package")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()

    sys.path.insert(0, os.path.join(args.build, "python"))
    from webdataset_cpp import wids as ours

    readers = [("webdataset_cpp.wids, \"numpy\" (PIL)", ours, "numpy"),
               ("webdataset_cpp.wids, \"rgb8\" (native)", ours, "rgb8")]
    if args.reference:
        sys.path.insert(0, args.reference)
        import wids as reference
        readers.append(("reference wids, \"numpy\" (PIL)", reference, "numpy"))

    with tempfile.TemporaryDirectory() as work:
        descriptors = write_shards(work, args.shards, args.samples)
        size = sum(os.path.getsize(d["url"]) for d in descriptors)
        results = {name: [] for name, _, _ in readers}
        for r in range(args.rounds):
            for name, module, transformations in (readers if r % 2 == 0 else readers[::-1]):
                cache = tempfile.mkdtemp(dir=work)
                rate, _ = measure(module, descriptors, transformations, r, cache)
                results[name].append(rate)

    total = args.shards * args.samples
    print(f"{args.shards} shards x {args.samples} JPEGs 500x375 q90 ({total} in all, "
          f"mean {size / total / 1000:.1f} KB a sample); random order; {args.rounds} rounds, "
          "medians")
    for name, rates in results.items():
        print(f"{name:40} {statistics.median(rates):10,.0f} samples/s")


if __name__ == "__main__":
    main()
