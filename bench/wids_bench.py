#!/usr/bin/python3
"""Random access through webdataset_cpp.wids.ShardListDataset, and, with
--reference DIR (a checkout whose DIR/wids is the reference project's wids
package), through the reference's, on the same shards in one run.

Each round makes a fresh dataset (no transformations: the members as
streams) and reads every sample once in a ChunkedSampler's order (chunks of
--chunk, the order the samplers give a DataLoader), then once more in a
uniformly random order with --lru shards open. Reported per reader: the
first sample (the dataset made, its first shard opened), samples/s in the
chunked order (the first pass over the shards, which opens each), and in the
random order. Medians over --rounds, reader order alternating.

The shards: --shards tars of --samples samples, each a .jpg of --bytes
random bytes and a .cls. Usage:

  bench/wids_bench.py [--shards 8] [--samples 1000] [--bytes 100000] [--rounds 5]
                      [--reference DIR] [--build build]
"""

import argparse
import contextlib
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


def write_shards(directory, shards, samples, size):
    rng = random.Random(0)
    payload = rng.randbytes(size)
    descriptors = []
    for s in range(shards):
        path = os.path.join(directory, f"shard-{s:06d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(samples):
                for name, data in ((f"{s}_{i:06d}.jpg", payload[i % 97:] + payload[:i % 97]),
                                   (f"{s}_{i:06d}.cls", str(i % 1000).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        descriptors.append({"url": path, "nsamples": samples})
    return descriptors


def measure(module, descriptors, chunk, lru, seed, cache_dir):
    t0 = time.perf_counter()
    dataset = module.ShardListDataset(descriptors, transformations=[], lru_size=lru,
                                      cache_dir=cache_dir)
    first = dataset[0]
    t_first = time.perf_counter() - t0
    total = len(dataset)
    order = list(module.ChunkedSampler(dataset, chunksize=chunk, seed=seed, shufflefirst=True))
    check = 0
    t0 = time.perf_counter()
    for i in order:
        check += len(dataset[i][".jpg"].getvalue())
    t_chunked = time.perf_counter() - t0
    uniform = list(range(total))
    random.Random(seed).shuffle(uniform)
    t0 = time.perf_counter()
    for i in uniform:
        check += len(dataset[i][".jpg"].getvalue())
    t_random = time.perf_counter() - t0
    del first
    return t_first, total / t_chunked, total / t_random, check


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--bytes", type=int, default=100000)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--lru", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reference", help="a directory holding the reference's wids package")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()

    sys.path.insert(0, os.path.join(args.build, "python"))
    from webdataset_cpp import wids as ours

    readers = [("webdataset_cpp.wids", ours)]
    if args.reference:
        sys.path.insert(0, args.reference)
        import wids as reference
        readers.append(("reference wids", reference))

    with tempfile.TemporaryDirectory() as work:
        descriptors = write_shards(work, args.shards, args.samples, args.bytes)
        results = {name: [] for name, _ in readers}
        checks = set()
        for r in range(args.rounds):
            for name, module in (readers if r % 2 == 0 else readers[::-1]):
                cache = tempfile.mkdtemp(dir=work)
                with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet) \
                        if module is not ours else contextlib.nullcontext():
                    first, chunked, uniform, check = measure(module, descriptors, args.chunk,
                                                             args.lru, r, cache)
                results[name].append((first, chunked, uniform))
                checks.add(check)
        assert len(checks) == 1, "the readers read different bytes"

    total = args.shards * args.samples
    print(f"{args.shards} shards x {args.samples} samples ({total} in all), .jpg of "
          f"{args.bytes} bytes; chunks of {args.chunk}; {args.lru} shards open; "
          f"{args.rounds} rounds, medians")
    print(f"{'reader':24} {'first sample ms':>16} {'chunked samples/s':>18} "
          f"{'random samples/s':>17}")
    for name, rows in results.items():
        first, chunked, uniform = (statistics.median(column) for column in zip(*rows))
        print(f"{name:24} {first * 1e3:16.1f} {chunked:18,.0f} {uniform:17,.0f}")


if __name__ == "__main__":
    main()
