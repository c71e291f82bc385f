#!/usr/bin/python3
"""What counting remote shards costs without a dataset index, what building
that index costs, and what checking the shards costs: the shards (with .idx
sidecars) are served by a server that answers each request after
--latency-ms (a far object store's round trip; SlowServer of
wids_remote_bench.py).

  one by one   wds.count_samples(url) for each shard in turn: how counts
               were read before they were read kCountThreads at a time
  plan_epoch   wds.plan_epoch of WebDataset(urls, split="samples"): the
               counts of every shard, read 16 at a time
  index -j1    `wds-shard index --jobs 1 --dir D URL...`: every shard
               scanned in turn (a header scan: the shard itself is read)
  index        the same with the default --jobs (16 for remote shards)
  verify -j1,  `wds-shard verify` and `wds-shard stats URL...`, --jobs 1 and
  verify,      the default (16 for remote shards): every shard read whole
  stats -j1,   (verify) or scanned (stats)
  stats

Each measurement runs in a fresh process (a process keeps the counts it
read); rounds alternate the modes. Usage:

  bench/count_remote_bench.py [--shards 400] [--latency-ms 20] [--rounds 3] [--build build]

(wds-shard index then writes the indexes into a temporary directory.)
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
sys.path.insert(0, HERE)
from wids_remote_bench import SlowServer  # noqa: E402

CHILD = r"""
import json, sys, time
import webdataset_cpp as wds
mode, urls = sys.argv[1], json.loads(sys.argv[2])
t0 = time.perf_counter()
if mode == "one by one":
    total = sum(wds.count_samples(url) for url in urls)
else:
    dataset = wds.WebDataset(urls, shardshuffle=False, split="samples").batched(64)
    total = wds.plan_epoch(dataset, num_workers=8).samples
print(json.dumps({"seconds": time.perf_counter() - t0, "samples": total}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=400)
    parser.add_argument("--latency-ms", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(args.build), "python"))
    sys.path.insert(0, env["PYTHONPATH"])
    import webdataset_cpp as wds

    with tempfile.TemporaryDirectory() as work:
        base = os.path.join(work, "base.tar")
        with wds.TarWriter(base) as w:
            for i in range(20):
                w.write({"__key__": f"k{i:04d}", "cls": str(i).encode()})
        wds.write_index(base)
        names = [f"train-{i:06d}.tar" for i in range(args.shards)]
        for name in names:
            os.symlink(base, os.path.join(work, name))
            os.symlink(base + ".idx", os.path.join(work, name + ".idx"))
        server = SlowServer(work, args.latency_ms)
        try:
            url_list = [server.url(n) for n in names]
            urls = json.dumps(url_list)
            tool = os.path.join(os.path.abspath(args.build), "tools", "wds-shard")
            modes = ["one by one", "plan_epoch", "index -j1", "index", "verify -j1", "verify",
                     "stats -j1", "stats"]
            seconds = {mode: [] for mode in modes}
            for r in range(args.rounds):
                for mode in (modes if r % 2 == 0 else modes[::-1]):
                    command, _, serial = mode.partition(" ")
                    if command in ("index", "verify", "stats"):
                        options = ["--jobs", "1"] if serial else []
                        out_dir = tempfile.mkdtemp(dir=work)
                        if command == "index":
                            options += ["--dir", out_dir]
                        start = time.perf_counter()
                        out = subprocess.run([tool, command, *options, *url_list], check=True,
                                             capture_output=True, text=True).stdout
                        seconds[mode].append(time.perf_counter() - start)
                        if command == "index":
                            assert len(os.listdir(out_dir)) == args.shards
                        elif command == "verify":
                            assert out.count(": ok (20 samples)\n") == args.shards, out
                        else:
                            assert f"samples {20 * args.shards} " in out, out[-300:]
                        continue
                    out = subprocess.run([sys.executable, "-c", CHILD, mode, urls], env=env,
                                         check=True, capture_output=True, text=True).stdout
                    result = json.loads(out)
                    assert result["samples"] == 20 * args.shards, result
                    seconds[mode].append(result["seconds"])
        finally:
            server.stop()
    print(f"{args.shards} remote shards with .idx sidecars, a server answering after "
          f"{args.latency_ms:g} ms; median of {args.rounds} rounds, each in a fresh process")
    for mode in modes:
        print(f"  {mode:<12} {statistics.median(seconds[mode]):7.3f} s")
    median = {mode: statistics.median(seconds[mode]) for mode in modes}
    print(f"  plan_epoch counts {median['one by one'] / median['plan_epoch']:.1f}x faster; "
          f"with 16 jobs, wds-shard index {median['index -j1'] / median['index']:.1f}x faster, "
          f"verify {median['verify -j1'] / median['verify']:.1f}x, "
          f"stats {median['stats -j1'] / median['stats']:.1f}x")


if __name__ == "__main__":
    main()
