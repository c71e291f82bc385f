#!/usr/bin/python3
"""Writing shards to S3, side by side in one run against one local s3rver
(tests/s3, installed by scripts/deps.sh): --samples samples of a --bytes
random .bin and a .cls, written by wds.ShardWriter with --maxcount samples
per shard

  local     to files in a temporary directory (no upload: the floor);
  native-1  to s3://bench/.../part-%04d.tar (each shard staged, then
            uploaded by the native writer: one PUT, or a multipart upload
            of --part-mib parts), one part in flight at a time;
  native-4  the same with upload_concurrency=4 (the default);
  native-4-inline  native-4 with upload_in_background=False: each shard
            uploads in the write that finishes it, instead of while the
            next shard fills;
  aws-sdk   the local shards uploaded afterwards by AWS's JavaScript SDK
            (PutObject, one process per shard, as tests/s3/s3.js does),
            timed on its own, plus the local write.

Each round writes everything once; medians of --rounds, the order rotating.
s3rver is one JavaScript process that writes every object to its own
directory, so the figures are a ratio on one server, not what S3 takes.

--produce-mb-s N makes each sample cost its bytes / N MB/s before it is
written, as a producer would (encoding images, say): the work an upload in
the background overlaps.

--emulate CONN_MB_S,LATENCY_MS replaces s3rver by a stand-in for S3's
network: a threaded server in this process that answers the upload
requests after LATENCY_MS, reads each connection's body at CONN_MB_S at most
(a single connection's limit, which is what concurrent parts overcome),
checks no signature and keeps nothing; the paths are then local and
native-1/2/4/8 (upload_concurrency).

  bench/s3_write_bench.py [--samples 2000] [--bytes 100000] [--maxcount 500]
                          [--part-mib 16] [--rounds 3] [--build build]
                          [--emulate 50,20] [--produce-mb-s 100]
"""

import argparse
import glob
import http.server
import threading
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


class Emulator(http.server.BaseHTTPRequestHandler):
    """S3's upload requests, answered after a latency, bodies read at a rate."""

    protocol_version = "HTTP/1.1"
    rate = 50e6  # bytes/s per connection
    latency = 0.02

    def log_message(self, *args):
        pass

    def _drain(self):
        left = int(self.headers.get("Content-Length", 0))
        start = time.perf_counter()
        read = 0
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 20))
            left -= len(chunk)
            read += len(chunk)
            ahead = read / self.rate - (time.perf_counter() - start)
            if ahead > 0:
                time.sleep(ahead)
        time.sleep(self.latency)

    def _answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self._drain()
        if "uploads" in self.path:
            self._answer(200, b"<InitiateMultipartUploadResult><UploadId>u1</UploadId>"
                              b"</InitiateMultipartUploadResult>")
        else:
            self._answer(200, b"<CompleteMultipartUploadResult><ETag>&quot;x-1&quot;</ETag>"
                              b"</CompleteMultipartUploadResult>")

    def do_PUT(self):
        self._drain()
        self._answer(200, headers=[("ETag", '"p"')])

    def do_DELETE(self):
        self._drain()
        self._answer(204)


def start_emulator(spec):
    rate, latency = (float(x) for x in spec.split(","))
    Emulator.rate, Emulator.latency = rate * 1e6, latency / 1e3
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Emulator)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--bytes", type=int, default=100000)
    parser.add_argument("--maxcount", type=int, default=500)
    parser.add_argument("--part-mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--emulate", default=None)
    parser.add_argument("--produce-mb-s", type=float, default=0)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import webdataset_cpp as wds

    samples = [{"__key__": f"s{i:07d}", "bin": os.urandom(args.bytes), "cls": i % 10}
               for i in range(args.samples)]
    megabytes = args.samples * args.bytes / 1e6
    work = tempfile.mkdtemp(prefix="s3-write-bench-")
    if args.emulate:
        emulator, endpoint = start_emulator(args.emulate)
    else:
        server, endpoint = start_s3rver(work)
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=KEY,
                      AWS_SECRET_ACCESS_KEY=SECRET, TMPDIR=work)

    def write(pattern, **kw):
        owed = 0.0  # the producer's time per sample, slept in slices of 5 ms
        with wds.ShardWriter(pattern, maxcount=args.maxcount, verbose=0, **kw) as sink:
            for sample in samples:
                if args.produce_mb_s > 0:
                    owed += args.bytes / (args.produce_mb_s * 1e6)
                    if owed >= 0.005:
                        start = time.perf_counter()
                        time.sleep(owed)
                        owed -= time.perf_counter() - start
                sink.write(sample)

    def local(n):
        out = os.path.join(work, f"local{n}")
        os.makedirs(out)
        write(os.path.join(out, "part-%04d.tar"))
        shutil.rmtree(out)

    def native(concurrency, in_background=True):
        def run(n):
            remote = wds.RemoteOptions(upload_part_size=args.part_mib << 20,
                                       upload_concurrency=concurrency)
            write(f"s3://bench/native{concurrency}-{int(in_background)}-{n}/part-%04d.tar",
                  remote=remote, upload_in_background=in_background)
        return run

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

    if args.emulate:
        paths = {"local": local, **{f"native-{c}": native(c) for c in (1, 2, 4, 8)},
                 "native-4-inline": native(4, in_background=False)}
    else:
        paths = {"local": local, "native-1": native(1), "native-4": native(4),
                 "native-4-inline": native(4, in_background=False), "aws-sdk": aws_sdk}
    times = {name: [] for name in paths}
    try:
        for r in range(args.rounds):
            order = list(paths)[r % len(paths):] + list(paths)[:r % len(paths)]
            for name in order:
                start = time.perf_counter()
                paths[name](r)
                times[name].append(time.perf_counter() - start)
    finally:
        if args.emulate:
            emulator.shutdown()
        else:
            server.terminate()
            server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    where = f"emulated S3 ({args.emulate} MB/s,ms)" if args.emulate else "s3rver"
    print(f"{args.samples} samples of {args.bytes} bytes ({megabytes:.0f} MB), "
          f"{args.maxcount} per shard, parts of {args.part_mib} MiB, to {where}; "
          f"medians of {args.rounds}")
    pace = f", produced at {args.produce_mb_s:g} MB/s" if args.produce_mb_s else ""
    print(f"{'path' + pace:<16}{'seconds':>10}{'MB/s':>10}")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:<16}{median:>10.2f}{megabytes / median:>10.0f}")


if __name__ == "__main__":
    main()
