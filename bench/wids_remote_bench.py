#!/usr/bin/python3
"""Remote shards through webdataset_cpp.wids.ShardListDataset: fetched whole
into the cache (remote_reads="download", the reference's way) against read by
ranged requests (remote_reads="ranges"), side by side in one run, from nginx
on 127.0.0.1 (each shard with its .idx sidecar beside it). "ranges+kept" is
"ranges" with a native cache (RemoteOptions.cache_dir), which keeps each
shard's index for the next opening on the machine.

Per round and mode, a fresh dataset (and an empty cache):
  sparse   --sparse uniformly random samples (a sample of a large dataset):
           seconds, and the bytes the server sent (nginx's log);
  again    the same samples through another fresh dataset on the same cache
           (another process of the machine): seconds, requests and bytes;
  random   then every sample once in a uniformly random order, by
           dataset[i] one at a time, and, for "ranges", by
           dataset.__getitems__ in batches of --batch (what PyTorch's
           DataLoader calls from 2.0 on): samples/s;
  first    for "ranges", the first such batch of a fresh dataset, which opens
           the shards it touches (--threads at a time): seconds.
Medians over --rounds, mode order alternating.

The shards: --shards tars of --samples samples, each a .jpg of --bytes random
bytes and a .cls (bench/wids_bench.py's). Usage:

  bench/wids_remote_bench.py [--shards 8] [--samples 500] [--bytes 100000]
                             [--sparse 200] [--batch 64] [--threads 16]
                             [--rounds 3] [--latency-ms MS] [--sparse-only]
                             [--build build]

Over a network, each ranged read costs a round trip; nginx on loopback
answers at once, so its figures show the bytes saved and the per-request
overhead. --latency-ms serves the same files from a threaded Python server
that answers every request that late instead (a far server's round trip),
which shows what reading a batch's requests at once gains.
"""

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from wids_bench import write_shards  # noqa: E402


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx serving `root` on 127.0.0.1, logging each response's bytes.

    Without tcp_nopush: with it (and sendfile), the tail of each ranged response
    on a kept-alive connection waits ~40 ms for the client's delayed ACK."""

    def __init__(self, root, work):
        self.work = os.path.join(work, "nginx")
        os.makedirs(os.path.join(self.work, "tmp"))
        self.port = free_port()
        self.log = os.path.join(self.work, "access.log")
        user = "user root root;" if os.getuid() == 0 else ""
        temps = " ".join(f"{k}_temp_path {self.work}/tmp/{k};"
                         for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(os.path.join(self.work, "nginx.conf"), "w") as f:
            f.write(f"""{user}
daemon off; master_process off; worker_processes 1; pid {self.work}/nginx.pid;
error_log {self.work}/error.log warn;
events {{ worker_connections 256; }}
http {{
  log_format sent '$bytes_sent';
  access_log {self.log} sent; sendfile on; keepalive_requests 100000;
  {temps}
  server {{ listen 127.0.0.1:{self.port}; root {root}; location / {{ }} }}
}}
""")
        self.process = subprocess.Popen(
            ["nginx", "-p", self.work, "-c", os.path.join(self.work, "nginx.conf"), "-e",
             os.path.join(self.work, "error.log")])
        for _ in range(200):
            try:
                with open(os.path.join(self.work, "nginx.pid")):
                    break
            except FileNotFoundError:
                time.sleep(0.05)
        time.sleep(0.2)

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def sent(self):
        """(requests, bytes) logged so far."""
        with open(self.log) as f:
            counts = [int(line) for line in f if line.strip()]
        return len(counts), sum(counts)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


class SlowServer:
    """A threaded HTTP/1.1 server of `root` that answers each request after
    `latency_ms` (a far server's round trip), with ranges, ETags and keep-alive."""

    def __init__(self, root, latency_ms):
        import http.server
        import threading

        sent = self.sent_log = []
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The headers and a short body go out as two writes: with Nagle's
            # algorithm, the body would wait ~40 ms for the client's delayed ACK.
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_GET(self):
                time.sleep(latency_ms / 1000)
                path = os.path.join(root, self.path.lstrip("/"))
                if not os.path.isfile(path):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                size = os.path.getsize(path)
                start, end, status = 0, size, 200
                requested = self.headers.get("Range")
                if requested:
                    first, last = requested.removeprefix("bytes=").split("-")
                    start, end, status = int(first), min(size, int(last or size - 1) + 1), 206
                with open(path, "rb") as f:
                    f.seek(start)
                    body = f.read(end - start)
                self.send_response(status)
                self.send_header("ETag", '"%x"' % int(os.path.getmtime(path) * 1e6))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with lock:
                    sent.append(len(body))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def sent(self):
        return len(self.sent_log), sum(self.sent_log)

    def stop(self):
        self.server.shutdown()


def measure(wds, server, descriptors, mode, args, seed, cache):
    wids = wds.wids
    total = len(descriptors) * args.samples
    rng = random.Random(seed)
    sparse = [rng.randrange(total) for _ in range(args.sparse)]
    uniform = list(range(total))
    rng.shuffle(uniform)

    remote = wds.RemoteOptions(cache_dir=os.path.join(cache, "native")) if "kept" in mode else None

    def dataset():
        return wids.ShardListDataset(descriptors, transformations=[], cache_dir=cache,
                                     remote_reads=mode.split("+")[0], read_threads=args.threads,
                                     lru_size=len(descriptors), remote=remote)

    def check(sample, i):
        shard, inner = divmod(i, args.samples)
        assert sample["__key__"] == f"{shard}_{inner:06d}", (sample["__key__"], i)
        assert len(sample[".jpg"].getvalue()) == args.bytes

    result = {}
    requests0, bytes0 = server.sent()
    t0 = time.perf_counter()
    d = dataset()
    for i in sparse:
        check(d[i], i)
    result["sparse_s"] = time.perf_counter() - t0
    time.sleep(0.3)  # nginx writes its log line after the response
    requests1, bytes1 = server.sent()
    result["sparse_requests"] = requests1 - requests0
    result["sparse_mb"] = (bytes1 - bytes0) / 1e6
    t0 = time.perf_counter()
    again = dataset()
    for i in sparse:
        check(again[i], i)
    result["again_s"] = time.perf_counter() - t0
    time.sleep(0.3)
    requests2, bytes2 = server.sent()
    result["again_requests"] = requests2 - requests1
    result["again_mb"] = (bytes2 - bytes1) / 1e6
    if args.sparse_only:
        return result
    t0 = time.perf_counter()
    for i in uniform:
        check(d[i], i)
    result["one_at_a_time"] = total / (time.perf_counter() - t0)
    if mode.startswith("ranges"):
        d = dataset()
        t0 = time.perf_counter()
        batch = uniform[:args.batch]
        for sample, i in zip(d.__getitems__(batch), batch):
            check(sample, i)
        result["first_batch_s"] = time.perf_counter() - t0
        d = dataset()
        for s in range(len(descriptors)):  # every shard opened first, as in the pass above
            d.__getitems__([s * args.samples])
        t0 = time.perf_counter()
        for b in range(0, total, args.batch):
            batch = uniform[b:b + args.batch]
            for sample, i in zip(d.__getitems__(batch), batch):
                check(sample, i)
        result["batched"] = total / (time.perf_counter() - t0)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--bytes", type=int, default=100000)
    parser.add_argument("--sparse", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0,
                        help="serve with a Python server that answers each request this late "
                             "instead of nginx")
    parser.add_argument("--sparse-only", action="store_true",
                        help="measure the sparse reads alone (no passes over every sample)")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()

    sys.path.insert(0, os.path.join(args.build, "python"))
    import webdataset_cpp as wds
    from webdataset_cpp import wids

    with tempfile.TemporaryDirectory() as work:
        www = os.path.join(work, "www")
        os.makedirs(www)
        local = write_shards(www, args.shards, args.samples, args.bytes)
        for d in local:
            wds.write_index(d["url"])
        server = SlowServer(www, args.latency_ms) if args.latency_ms else Nginx(www, work)
        try:
            descriptors = [{"url": server.url(os.path.basename(d["url"])),
                            "nsamples": d["nsamples"]} for d in local]
            modes = ["download", "ranges", "ranges+kept"]
            results = {mode: [] for mode in modes}
            for r in range(args.rounds):
                for mode in (modes if r % 2 == 0 else modes[::-1]):
                    cache = tempfile.mkdtemp(dir=work)
                    results[mode].append(measure(wds, server, descriptors, mode, args, r, cache))
                    shutil.rmtree(cache)
        finally:
            server.stop()

    total = args.shards * args.samples
    print(f"{args.shards} shards x {args.samples} samples ({total} in all, "
          f"{total * args.bytes / 1e6:,.0f} MB), .jpg of {args.bytes} bytes, with .idx "
          f"sidecars; {'nginx' if not args.latency_ms else f'a server answering after {args.latency_ms:g} ms'} "
          f"on 127.0.0.1; {args.rounds} rounds, medians")
    print(f"{'remote_reads':13} {'sparse: ' + str(args.sparse) + ' samples s':>24} "
          f"{'requests':>9} {'MB sent':>9} {'again s':>8} {'requests':>9} {'MB sent':>9} "
          f"{'random: [i] samples/s':>22} "
          f"{'__getitems__(' + str(args.batch) + ') samples/s':>26} "
          f"{'first batch, fresh s':>19}")
    for mode, rows in results.items():
        med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
        batched = f"{med['batched']:26,.0f}" if "batched" in med else f"{'-':>26}"
        first = f"{med['first_batch_s']:19.3f}" if "first_batch_s" in med else f"{'-':>19}"
        one = f"{med['one_at_a_time']:22,.0f}" if "one_at_a_time" in med else f"{'-':>22}"
        print(f"{mode:13} {med['sparse_s']:24.3f} {med['sparse_requests']:9.0f} "
              f"{med['sparse_mb']:9.1f} {med['again_s']:8.3f} {med['again_requests']:9.0f} "
              f"{med['again_mb']:9.2f} {one} {batched} {first}")


if __name__ == "__main__":
    main()
