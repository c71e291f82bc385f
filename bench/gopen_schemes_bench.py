#!/usr/bin/python3
"""Shards read through a Python gopen_schemes handler against the native
reader, side by side in one run: WebDataset over --shards local tars of
--samples samples (a .jpg of --bytes random bytes and a .cls, as
bench/wids_bench.py writes them), by path, as myproto://PATH, whose handler
returns open(PATH, "rb") (read by readinto into the reader's buffer), and as
readonly://PATH, whose handler returns an object with read() alone (each
read's bytes copied). Each round reads every sample once; medians of
--rounds, the order rotating.

  bench/gopen_schemes_bench.py [--shards 8] [--samples 500] [--bytes 100000]
                               [--rounds 5] [--build build]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from wids_bench import write_shards  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--bytes", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import webdataset_cpp as wds

    class ReadOnly:
        def __init__(self, path):
            self.file = open(path, "rb")

        def read(self, size=-1):
            return self.file.read(size)

        def close(self):
            self.file.close()

    prefix = "myproto://"
    wds.gopen_schemes["myproto"] = lambda url, *args: open(url[len("myproto://"):], "rb")
    wds.gopen_schemes["readonly"] = lambda url, *args: ReadOnly(url[len("readonly://"):])
    with tempfile.TemporaryDirectory() as work:
        paths = [d["url"] for d in write_shards(work, args.shards, args.samples, args.bytes)]
        ways = {"native": paths, "myproto://": [prefix + p for p in paths],
                "readonly://": ["readonly://" + p for p in paths]}
        rates = {name: [] for name in ways}
        names = list(ways)
        for r in range(args.rounds):
            for name in names[r % 3:] + names[:r % 3]:
                start, count = time.perf_counter(), 0
                for sample in wds.WebDataset(ways[name], shardshuffle=False):
                    assert len(sample["jpg"]) == args.bytes
                    count += 1
                assert count == args.shards * args.samples
                rates[name].append(count / (time.perf_counter() - start))
    mb = args.shards * args.samples * args.bytes / 1e6
    print(f"{args.shards} shards x {args.samples} samples of {args.bytes} bytes ({mb:,.0f} MB), "
          f"page cache; {args.rounds} rounds, medians")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:14} {median:10,.0f} samples/s {median * args.bytes / 1e9:6.2f} GB/s")


if __name__ == "__main__":
    main()
