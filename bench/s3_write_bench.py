#!/usr/bin/python3
"""Writing shards to S3, side by side in one run against one local s3rver
(tests/s3, installed by scripts/deps.sh): --samples samples of a --bytes
random .bin and a .cls, written by wds.ShardWriter with --maxcount samples
per shard

  local     to files in a temporary directory (no upload: the floor);
  native    to s3://bench/native/part-%04d.tar (each shard staged, then
            uploaded by the native writer: one PUT, or a multipart upload
            of --part-mib parts);
  aws-sdk   the local shards uploaded afterwards by AWS's JavaScript SDK
            (PutObject, one process per shard, as tests/s3/s3.js does),
            timed on its own, plus the local write.

Each round writes everything once; medians of --rounds, the order rotating.
s3rver is one JavaScript process that writes every object to its own
directory, so the figures are a ratio on one server, not what S3 takes.

  bench/s3_write_bench.py [--samples 2000] [--bytes 100000] [--maxcount 500]
                          [--part-mib 16] [--rounds 3] [--build build]
"""

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
S3JS = os.path.join(ROOT, "tests", "s3", "s3.js")
KEY, SECRET = "BENCHKEY", "benchsecret"


def start_s3rver(work):
    os.makedirs(os.path.join(work, "root", "bench"))
    port_file = os.path.join(work, "port")
    log = open(os.path.join(work, "s3rver.log"), "wb")
    process = subprocess.Popen(["node", "--no-warnings", S3JS, "serve", "--root",
                                os.path.join(work, "root"), "--port-file", port_file,
                                "--access-key", KEY, "--secret-key", SECRET],
                               stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while not os.path.exists(port_file):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            sys.exit(f"s3rver did not start: {open(log.name).read()}")
        time.sleep(0.05)
    with open(port_file) as f:
        return process, f"http://127.0.0.1:{int(f.read())}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--bytes", type=int, default=100000)
    parser.add_argument("--maxcount", type=int, default=500)
    parser.add_argument("--part-mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import webdataset_cpp as wds

    samples = [{"__key__": f"s{i:07d}", "bin": os.urandom(args.bytes), "cls": i % 10}
               for i in range(args.samples)]
    megabytes = args.samples * args.bytes / 1e6
    work = tempfile.mkdtemp(prefix="s3-write-bench-")
    server, endpoint = start_s3rver(work)
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=KEY,
                      AWS_SECRET_ACCESS_KEY=SECRET, TMPDIR=work)
    remote = wds.RemoteOptions(upload_part_size=args.part_mib << 20)

    def write(pattern, **kw):
        with wds.ShardWriter(pattern, maxcount=args.maxcount, verbose=0, **kw) as sink:
            for sample in samples:
                sink.write(sample)

    def local(n):
        out = os.path.join(work, f"local{n}")
        os.makedirs(out)
        write(os.path.join(out, "part-%04d.tar"))
        shutil.rmtree(out)

    def native(n):
        write(f"s3://bench/native{n}/part-%04d.tar", remote=remote)

    def aws_sdk(n):
        out = os.path.join(work, f"sdk{n}")
        os.makedirs(out)
        write(os.path.join(out, "part-%04d.tar"))
        for path in sorted(glob.glob(os.path.join(out, "*.tar"))):
            subprocess.run(["node", "--no-warnings", S3JS, "put", "--endpoint", endpoint,
                            "--access-key", KEY, "--secret-key", SECRET, "--bucket", "bench",
                            "--key", f"sdk{n}/{os.path.basename(path)}", "--file", path],
                           check=True)
        shutil.rmtree(out)

    paths = {"local": local, "native": native, "aws-sdk": aws_sdk}
    times = {name: [] for name in paths}
    try:
        for r in range(args.rounds):
            order = list(paths)[r % len(paths):] + list(paths)[:r % len(paths)]
            for name in order:
                start = time.perf_counter()
                paths[name](r)
                times[name].append(time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.samples} samples of {args.bytes} bytes ({megabytes:.0f} MB), "
          f"{args.maxcount} per shard, parts of {args.part_mib} MiB; medians of {args.rounds}")
    print(f"{'path':<10}{'seconds':>10}{'MB/s':>10}")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:<10}{median:>10.2f}{megabytes / median:>10.0f}")


if __name__ == "__main__":
    main()
