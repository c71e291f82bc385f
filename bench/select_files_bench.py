#!/usr/bin/python3
"""select_files that keeps the small field of samples with a big one, beside
reading every member: one local shard of --samples samples of a --bytes .jpg
and a short .json, in the page cache; medians of --rounds of each, side by
side. Bytes read are /proc/self/io's rchar (what read() returned).

  bench/select_files_bench.py [--samples 400] [--bytes 1000000] [--rounds 5]
                              [--build build]
"""
import argparse
import io
import os
import statistics
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=400)
parser.add_argument("--bytes", type=int, default=1000000)
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
args = parser.parse_args()
sys.path.insert(0, os.path.join(args.build, "python"))
import webdataset_cpp as wds  # noqa: E402



def write_shard(path):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(args.samples):
            for name, data in ((f"s{i:05d}.jpg", os.urandom(args.bytes)),
                               (f"s{i:05d}.json", b'{"a": 1}')):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def bytes_read():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def run(path, **kw):
    """(seconds, MB read, samples) of one pass over the shard."""
    start, before = time.perf_counter(), bytes_read()
    pipeline = wds.DataPipeline(wds.SimpleShardList([path]), wds.tarfile_to_samples(**kw))
    samples = sum(1 for _ in pipeline)
    return time.perf_counter() - start, (bytes_read() - before) / 1e6, samples


def main():
    work = tempfile.mkdtemp(prefix="select-files-bench-")
    path = os.path.join(work, "big.tar")
    write_shard(path)
    results = {"all": [], "json only": []}
    for _ in range(args.rounds):
        results["all"].append(run(path))
        results["json only"].append(run(path, select_files=lambda n: n.endswith(".json")))
    os.unlink(path)
    os.rmdir(work)
    print(f"{args.samples} samples of a {args.bytes}-byte .jpg and a .json; "
          f"medians of {args.rounds}")
    for name, runs in results.items():
        seconds = statistics.median(r[0] for r in runs)
        megabytes = statistics.median(r[1] for r in runs)
        print(f"{name:<10} {seconds:.3f} s  {megabytes:.1f} MB read  "
              f"{runs[0][2] / seconds:,.0f} samples/s")


if __name__ == "__main__":
    main()
