#!/usr/bin/python3
"""Writing .tar.gz and .tar.zst shards on several threads, side by side in
one run: ShardWriter(compress_threads=N) for each N, and Python's tarfile
writing "w|gz" (how the reference's TarWriter compresses) on the same
samples. Rounds interleave the writers; prints one JSON line per writer and
round, then the medians (MB/s of uncompressed tar, and the shards' size).

  /usr/bin/python3 bench/compress_bench.py [--data text|noise] [--megabytes 64]
      [--threads 1,2] [--rounds 3] [--build build]

text: samples of repetitive text and small integers (about 4:1 under gzip);
noise: 100 KB random members (as JPEGs are: nothing to gain).
"""

import argparse
import io
import json
import os
import statistics
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_samples(kind, megabytes):
    rng = __import__("random").Random(7)
    samples, total, i = [], 0, 0
    while total < megabytes * 1e6:
        if kind == "noise":
            fields = {"bin": rng.randbytes(100_000)}
        else:
            words = " ".join(f"w{rng.randrange(2000)}" for _ in range(4000))
            fields = {"txt": words.encode(), "cls": str(i % 1000).encode()}
        samples.append({"__key__": f"{i:07d}", **fields})
        total += sum(len(v) for k, v in fields.items())
        i += 1
    return samples


def write_native(wds, directory, samples, compress, threads):
    with wds.ShardWriter(os.path.join(directory, f"s-%04d.tar.{compress}"), maxsize=1e9,
                         verbose=0, encoder=False, compress_threads=threads) as sink:
        for s in samples:
            sink.write(s)


def write_tarfile(directory, samples):
    with open(os.path.join(directory, "s.tar.gz"), "wb") as f, \
            tarfile.open(fileobj=f, mode="w|gz") as tar:
        for s in samples:
            for field in sorted(k for k in s if not k.startswith("__")):
                data = s[field]
                info = tarfile.TarInfo(f"{s['__key__']}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="text", choices=("text", "noise"))
    parser.add_argument("--megabytes", type=float, default=64)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import webdataset_cpp as wds

    samples = make_samples(args.data, args.megabytes)
    megabytes = sum(len(v) for s in samples for k, v in s.items() if k != "__key__") / 1e6
    writers = [("tarfile w|gz", lambda d: write_tarfile(d, samples))]
    for compress in ("gz", "zst"):
        for t in (int(x) for x in args.threads.split(",")):
            writers.append((f"ShardWriter {compress} threads={t}",
                            lambda d, c=compress, t=t: write_native(wds, d, samples, c, t)))
    rates = {name: [] for name, _ in writers}
    sizes = {}
    print(json.dumps({"data": args.data, "megabytes": round(megabytes, 1),
                      "samples": len(samples)}))
    for round_ in range(args.rounds):
        for name, write in writers:
            with tempfile.TemporaryDirectory() as d:
                start = time.perf_counter()
                write(d)
                seconds = time.perf_counter() - start
                sizes[name] = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
            rates[name].append(megabytes / seconds)
            print(json.dumps({"round": round_, "writer": name, "mb_per_s": round(megabytes / seconds, 1),
                              "megabytes_out": round(sizes[name] / 1e6, 2)}))
    base = statistics.median(rates[writers[0][0]])
    for name, _ in writers:
        median = statistics.median(rates[name])
        print(f"{name}: median {median:.1f} MB/s ({median / base:.2f}x tarfile), "
              f"{sizes[name] / 1e6:.2f} MB out")


if __name__ == "__main__":
    main()
