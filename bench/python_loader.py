#!/usr/bin/python3
"""Side-by-side throughput of webdataset_cpp from Python, wds-bench and the
reference webdataset package, on the same shards and pipeline:

    read -> shuffle(1000) -> decode rgb8 -> to_tuple(jpg, cls) -> batched(64)

  wds-bench            the C++ Loader, 2 worker threads (tools/wds-bench)
  native-loader        webdataset_cpp.Loader(workers=2) from Python
  dataloader           webdataset_cpp dataset in torch's DataLoader(num_workers=2): batches
                       cross in reused shared blocks (webdataset_cpp/_shared.py)
  dataloader-copy      the same through torch's own transfer (WDS_SHARED_BATCH_BYTES=0):
                       each batch copied into a fresh shared-memory segment
  reference-loader     the reference's WebLoader(num_workers=2) (= its DataLoader path)
  native-loader-224,   the same with a centre crop resized to 224x224: here decode("rgb8",
  reference-loader-224 size=(224, 224), crop="center"); in the reference decode("pil") and
                       PIL's ImageOps.fit to 224x224 with an area average (Image.BOX), the
                       nearest it offers, in a map_tuple
  raw, reference-raw   iteration of undecoded sample dicts in one process
  rss-N                peak RSS of webdataset_cpp.Loader (2 workers, shuffle 1000, no
                       decode) over N shards (links cycling over the data's shards)
  transfer             what torch's DataLoader alone costs per batch: 30 ready-made
                       uint8 [64, 375, 500, 3] batches from 1 worker process
  costs                (only with --modes costs) per-image costs in one process over the
                       first shard: PIL's decode, the reference's rgb8 conversion, NumPy
                       collation, and this package's decode with and without batching

Every measurement runs in a fresh process; rounds alternate the modes. Usage:

  bench/python_loader.py --data /work/data/imagenet [--shards 8] [--rounds 3]
      [--reference /path/to/webdataset/src] [--build build] [--rss 8,64]

Not part of the test suite (the reference package is only compared locally; it needs
Debian's python3-braceexpand and python3-yaml).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"


def pattern(data, shards):
    return os.path.join(data, f"imagenet-{{000000..{shards - 1:06d}}}.tar")


def timed(batches, count):
    start = time.monotonic()
    first = None
    samples = 0
    for batch in batches:
        if first is None:
            first = time.monotonic() - start
        samples += count(batch)
    seconds = time.monotonic() - start
    return {"samples": samples, "seconds": seconds, "first_batch_s": first}


def run_mode(mode, args):
    """Runs one measurement in this process; returns a dict."""
    urls = pattern(args.data, args.shards)
    if mode.startswith("reference"):
        sys.path.insert(0, args.reference)
        import warnings

        warnings.simplefilter("ignore")
        import webdataset as wds
    else:
        sys.path.insert(0, os.path.join(args.build, "python"))
        import webdataset_cpp as wds

    def pipeline():
        return (wds.WebDataset(urls, shardshuffle=100, seed=0).shuffle(1000).decode("rgb8")
                .to_tuple("jpg", "cls").batched(64))

    def pipeline_224():
        ds = wds.WebDataset(urls, shardshuffle=100, seed=0).shuffle(1000)
        if not mode.startswith("reference"):
            return (ds.decode("rgb8", size=(224, 224), crop="center").to_tuple("jpg", "cls")
                    .batched(64))
        import numpy as np
        from PIL import Image, ImageOps

        def fit(image):
            return np.asarray(ImageOps.fit(image.convert("RGB"), (224, 224), Image.BOX))

        return (ds.decode("pil").to_tuple("jpg", "cls").map_tuple(fit, lambda cls: cls)
                .batched(64))

    labels = lambda batch: len(batch[1])  # noqa: E731
    if mode == "native-loader":
        result = timed(wds.Loader(pipeline(), workers=2), labels)
    elif mode == "native-loader-224":
        result = timed(wds.Loader(pipeline_224(), workers=2), labels)
    elif mode == "reference-loader-224":
        import torch.utils.data

        loader = torch.utils.data.DataLoader(pipeline_224(), batch_size=None, num_workers=2)
        result = timed(loader, labels)
    elif mode in ("dataloader", "dataloader-copy", "reference-loader"):
        import torch.utils.data

        loader = torch.utils.data.DataLoader(pipeline(), batch_size=None, num_workers=2)
        result = timed(loader, labels)
    elif mode in ("raw", "reference-raw"):
        ds = wds.WebDataset(urls, shardshuffle=False)
        result = timed(ds, lambda sample: 1)
        result["bytes"] = None
    elif mode == "transfer":
        result = measure_transfer()
    elif mode == "costs":
        return measure_costs(wds, os.path.join(args.data, "imagenet-000000.tar"))
    elif mode.startswith("rss-"):
        links = make_links(args, int(mode[4:]))
        ds = (wds.WebDataset(links, shardshuffle=100, seed=0).shuffle(1000)
              .to_tuple("jpg", "cls").batched(64))
        result = timed(wds.Loader(ds, workers=2), labels)
    else:
        raise ValueError(mode)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def measure_transfer():
    import numpy as np
    import torch.utils.data

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            batch = np.ones((64, 375, 500, 3), np.uint8)
            for _ in range(30):
                yield batch, np.arange(64)

    loader = torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=1)
    return timed(loader, lambda batch: len(batch[1]))


def measure_costs(wds, url):
    """Milliseconds per image of each step, median of 3 passes over one shard."""
    import io

    import numpy as np
    import PIL.Image

    jpgs = [s["jpg"] for s in wds.WebDataset(url, shardshuffle=False)]
    arrays = []

    def pil_decode():
        for b in jpgs:
            PIL.Image.open(io.BytesIO(b)).load()

    def reference_rgb8():  # the reference's imagehandler("rgb8")
        arrays.clear()
        for b in jpgs:
            img = PIL.Image.open(io.BytesIO(b))
            img.load()
            arrays.append(np.asarray(img.convert("RGB")))

    def collate():
        for i in range(0, len(arrays), 64):
            np.stack(arrays[i:i + 64])

    def ours(batched):
        ds = wds.WebDataset(url, shardshuffle=False).decode("rgb8")
        if batched:
            ds = ds.to_tuple("jpg", "cls").batched(64)
        for _ in ds:
            pass

    steps = {"pil_decode": pil_decode, "reference_rgb8": reference_rgb8, "collate": collate,
             "ours_decode": lambda: ours(False), "ours_decode_batched": lambda: ours(True)}
    out = {}
    for name, step in steps.items():
        times = []
        for _ in range(3):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times) * 1e3 / len(jpgs)
    return {"ms_per_image": out, "samples": len(jpgs), "seconds": 1, "first_batch_s": None}


def make_links(args, n):
    directory = os.path.join(tempfile.gettempdir(), f"wds-rss-links-{os.getuid()}")
    os.makedirs(directory, exist_ok=True)
    links = []
    for i in range(n):
        link = os.path.join(directory, f"s-{i:06d}.tar")
        target = pattern(args.data, args.shards).replace(
            f"{{000000..{args.shards - 1:06d}}}", f"{i % args.shards:06d}")
        if not os.path.islink(link) or os.readlink(link) != target:
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(target, link)
        links.append(link)
    return links


def run_wds_bench(args):
    tool = os.path.join(args.build, "tools", "wds-bench")
    out = subprocess.run([tool, "--workers", "2", "--batch", "64", "--shuffle", "1000",
                          "--decode", "rgb8", "--fields", "jpg,cls", "--json",
                          pattern(args.data, args.shards)], check=True, capture_output=True,
                         text=True).stdout
    report = json.loads(out)
    return {"samples": report["samples"], "seconds": report["seconds"],
            "first_batch_s": report.get("first_batch_s"),
            "peak_rss_mb": report.get("peak_rss_bytes", 0) / 2**20 or report.get("peak_rss_mb")}


def measure(mode, args):
    if mode == "wds-bench":
        return run_wds_bench(args)
    cmd = [PYTHON, os.path.abspath(__file__), "--run", mode, "--data", args.data, "--shards",
           str(args.shards), "--build", args.build]
    if args.reference:
        cmd += ["--reference", args.reference]
    env = dict(os.environ)
    if mode == "dataloader-copy":
        env["WDS_SHARED_BATCH_BYTES"] = "0"
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/work/data/imagenet")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reference", default=None)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--rss", default="8,64")
    parser.add_argument("--modes", default=None, help="comma-separated subset of the modes")
    parser.add_argument("--run", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    if args.run:
        print(json.dumps(run_mode(args.run, args)))
        return
    modes = ["wds-bench", "native-loader", "dataloader", "dataloader-copy", "raw"]
    if args.reference:
        modes += ["reference-loader", "reference-raw"]
    modes += ["native-loader-224"]
    if args.reference:
        modes += ["reference-loader-224"]
    modes += [f"rss-{n}" for n in args.rss.split(",") if n] + ["transfer"]
    if args.modes:
        modes = args.modes.split(",")
    # Warm the page cache so that no mode pays for the first read.
    for i in range(args.shards):
        with open(pattern(args.data, args.shards).replace(
                f"{{000000..{args.shards - 1:06d}}}", f"{i:06d}"), "rb") as f:
            while f.read(1 << 24):
                pass
    if modes == ["costs"]:
        print(json.dumps(measure("costs", args)["ms_per_image"], indent=1))
        return
    results = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in modes:
            result = measure(mode, args)
            result["samples_per_s"] = result["samples"] / result["seconds"]
            results[mode].append(result)
            print(f"round {r + 1} {mode:18s} {result['samples']:6d} samples "
                  f"{result['samples_per_s']:8.1f}/s first {result['first_batch_s'] or 0:.2f} s "
                  f"peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
    median = {m: statistics.median(x["samples_per_s"] for x in v) for m, v in results.items()}
    print("\nmedians (samples/s):")
    for m, v in median.items():
        rss = statistics.median(x["peak_rss_mb"] for x in results[m])
        print(f"  {m:18s} {v:8.1f}   peak RSS {rss:.0f} MB")
    if "transfer" in median:
        print(f"  torch DataLoader transfer: {64 / median['transfer'] * 1000:.0f} ms per "
              "uint8 [64, 375, 500, 3] batch")

    def ratio(a, b):
        if a in median and b in median:
            per_round = [x["samples_per_s"] / y["samples_per_s"]
                         for x, y in zip(results[a], results[b])]
            print(f"  {a} / {b}: median {statistics.median(per_round):.3f}  rounds "
                  + " ".join(f"{p:.3f}" for p in per_round))

    print("ratios:")
    ratio("native-loader", "wds-bench")
    ratio("native-loader", "reference-loader")
    ratio("dataloader", "reference-loader")
    ratio("dataloader-copy", "reference-loader")
    ratio("dataloader", "dataloader-copy")
    ratio("dataloader", "native-loader")
    ratio("raw", "reference-raw")
    ratio("native-loader-224", "reference-loader-224")


if __name__ == "__main__":
    main()
