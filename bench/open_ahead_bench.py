#!/usr/bin/python3
"""Remote shards opened ahead (RemoteOptions.open_ahead) against opened in
turn, side by side in one run: one reader (a DataLoader worker's share)
reads shards from an HTTP server that answers each request after a delay
(a first byte 100 ms away: a bucket in another region, a CDN behind a
redirect), decoding the JPEGs or only reading them.

  /usr/bin/python3 bench/open_ahead_bench.py [--shards 16] [--per-shard 100]
      [--latency 0.1] [--ahead 0,1,2] [--rounds 3] [--decode rgb8|none]

Makes its own shards (500x375 JPEGs at quality 90, ~75 KB, as
bench/make_imagenet_like.sh does), serves them from a child process (a
threaded server sending each file with sendfile(2) once its delay is over),
and reads them with webdataset_cpp built in --build (default build/).
Rounds interleave the settings; prints one JSON line per setting and round,
then the medians and their ratio to open_ahead=0.
"""

import argparse
import http.server
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def serve(root, port_file, latency):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            time.sleep(latency)
            path = os.path.join(root, self.path.lstrip("/"))
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.send_header("ETag", f'"{int(os.path.getmtime(path))}-{size}"')
                self.end_headers()
                self.wfile.flush()
                self.connection.sendfile(f)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


def make_shards(directory, shards, per_shard):
    import numpy as np
    from PIL import Image

    h, w = 375, 500
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    rng = np.random.default_rng(1)
    names = []
    for s in range(shards):
        name = f"shard-{s:06d}.tar"
        with tarfile.open(os.path.join(directory, name), "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(per_shard):
                phase = rng.uniform(0, 6.28)
                channels = [120 + 70 * np.sin(x / 41.0 + c + phase) * np.cos(y / 29.0 - c)
                            + 25 * np.sin((x + 2 * y) / 6.0 + c * 1.7 + phase)
                            + 34 * (rng.random((h, w)) - 0.5) for c in range(3)]
                pixels = np.clip(np.stack(channels, axis=2), 0, 255).astype(np.uint8)
                jpeg = io.BytesIO()
                Image.fromarray(pixels).save(jpeg, "JPEG", quality=90)
                for ext, data in (("jpg", jpeg.getvalue()), ("cls", str(i % 1000).encode())):
                    info = tarfile.TarInfo(f"s{s:03d}_{i:05d}.{ext}")
                    info.size = len(data)
                    info.mtime = 0
                    tar.addfile(info, io.BytesIO(data))
        names.append(name)
    return names


def read(wds, urls, ahead, decode):
    dataset = wds.WebDataset(urls, shardshuffle=False,
                             remote=wds.RemoteOptions(open_ahead=ahead, max_attempts=3 + ahead))
    if decode != "none":
        dataset = dataset.decode(decode)
    start = time.perf_counter()
    count = 0
    for _ in dataset:
        count += 1
    return count, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--per-shard", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--ahead", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decode", default="rgb8")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--serve", nargs=3, metavar=("ROOT", "PORT_FILE", "LATENCY"))
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve[0], args.serve[1], float(args.serve[2]))
    sys.path.insert(0, os.path.join(args.build, "python"))
    import webdataset_cpp as wds

    settings = [int(a) for a in args.ahead.split(",")]
    with tempfile.TemporaryDirectory() as work:
        names = make_shards(work, args.shards, args.per_shard)
        megabytes = sum(os.path.getsize(os.path.join(work, n)) for n in names) / 1e6
        port_file = os.path.join(work, "port")
        server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", work,
                                   port_file, str(args.latency)])
        try:
            while not os.path.exists(port_file):
                time.sleep(0.02)
            with open(port_file) as f:
                base = f"http://127.0.0.1:{f.read()}"
            urls = [f"{base}/{n}" for n in names]
            print(json.dumps({"shards": args.shards, "per_shard": args.per_shard,
                              "megabytes": round(megabytes, 1), "latency_s": args.latency,
                              "decode": args.decode}))
            rates = {a: [] for a in settings}
            read(wds, urls[:1], 0, "none")  # warm: the module, the connection
            for round_ in range(args.rounds):
                for ahead in settings:
                    count, seconds = read(wds, urls, ahead, args.decode)
                    assert count == args.shards * args.per_shard, count
                    rates[ahead].append(count / seconds)
                    print(json.dumps({"round": round_, "open_ahead": ahead,
                                      "samples_per_s": round(count / seconds, 1),
                                      "seconds": round(seconds, 3)}))
        finally:
            server.terminate()
            server.wait()
    base_rate = statistics.median(rates[settings[0]])
    for ahead in settings:
        median = statistics.median(rates[ahead])
        print(f"open_ahead={ahead}: median {median:.1f} samples/s, "
              f"{median / base_rate:.2f}x open_ahead={settings[0]}")


if __name__ == "__main__":
    main()
