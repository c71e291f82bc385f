#!/usr/bin/env python3
"""The GPU benchmark's data and its torchvision baseline (scripts/gpu_check.sh).

    scripts/gpu_baselines.py make --images N --shards S --out DIR
        N ImageNet-like JPEGs (500x375, quality 90; smooth gradients plus
        noise, so they compress like photographs rather than flat colour),
        made in parallel with PIL: DIR/jpeg/NNNNNN.jpg, and the same bytes as
        S shards DIR/shards/bench-NNNNNN.tar of samples (key.jpg, key.cls).
    scripts/gpu_baselines.py loader --shards PATTERN [--workers W] [--batch B] [--epochs E]
        webdataset_cpp.Loader(device="cuda") over those shards, decoding on the
        GPU (the Python figure beside wds-bench --device cuda's), in images/s.
    scripts/gpu_baselines.py torchvision --jpeg-dir DIR [--images N] [--batch B]...
        torchvision's batched decode_jpeg(device="cuda") alone, in images/s,
        on those JPEGs. The bytes are in host memory before the clock starts,
        so only the decode (and its host-to-device copy) is timed.
"""
import argparse
import io
import json
import multiprocessing
import os
import tarfile
import time

import numpy as np
from PIL import Image


def make_jpeg(index, width=500, height=375, quality=90):
    rng = np.random.default_rng(index)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 6.28, size=3)
    base = np.stack([127 + 100 * np.sin(x / (40 + 7 * c) + y / (55 + 5 * c) + phase[c])
                     for c in range(3)], axis=-1)
    noise = rng.normal(0, 18, size=base.shape)
    pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def make(args):
    with multiprocessing.Pool() as pool:
        jpegs = pool.map(make_jpeg, range(args.images), chunksize=16)
    os.makedirs(os.path.join(args.out, "jpeg"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "shards"), exist_ok=True)
    for i, j in enumerate(jpegs):
        with open(os.path.join(args.out, "jpeg", f"{i:06d}.jpg"), "wb") as f:
            f.write(j)
    per_shard = (len(jpegs) + args.shards - 1) // args.shards
    for s in range(args.shards):
        with tarfile.open(os.path.join(args.out, "shards", f"bench-{s:06d}.tar"), "w",
                          format=tarfile.USTAR_FORMAT) as tar:
            for i in range(s * per_shard, min(len(jpegs), (s + 1) * per_shard)):
                for name, data in ((f"{i:06d}.jpg", jpegs[i]), (f"{i:06d}.cls", b"%d" % (i % 1000))):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    info.mtime = 0
                    tar.addfile(info, io.BytesIO(data))
    print(json.dumps({"images": len(jpegs), "shards": args.shards,
                      "mean_jpeg_bytes": int(sum(map(len, jpegs)) / len(jpegs))}))


def time_torchvision(jpegs, batch, rounds):
    import torch
    from torchvision.io import decode_jpeg

    datas = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    batches = [datas[i:i + batch] for i in range(0, len(datas) - batch + 1, batch)]
    decode_jpeg(batches[0], device="cuda")  # warm up: handles and memory
    torch.cuda.synchronize()
    start = time.perf_counter()
    n = 0
    for _ in range(rounds):
        for b in batches:
            decode_jpeg(b, device="cuda")
            n += len(b)
    torch.cuda.synchronize()
    return n / (time.perf_counter() - start)


def torchvision_baseline(args):
    import torch
    import torchvision
    names = sorted(os.listdir(args.jpeg_dir))[: args.images]
    jpegs = [open(os.path.join(args.jpeg_dir, n), "rb").read() for n in names]
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "torchvision": torchvision.__version__, "images": len(jpegs),
              "mean_jpeg_bytes": int(sum(map(len, jpegs)) / len(jpegs))}
    for batch in args.batch or [64, 256]:
        result[f"torchvision_decode_jpeg_cuda_batch{batch}_img_s"] = round(
            time_torchvision(jpegs, batch, args.rounds))
    print(json.dumps(result))


def python_loader(args):
    import torch

    import webdataset_cpp as wds

    dataset = (wds.WebDataset(args.shards, shardshuffle=100, seed=0).shuffle(1000)
               .decode(args.spec, device="cuda", **({"size": (224, 224), "crop": "center"}
                                                   if args.crop224 else {}))
               .to_tuple("jpg", "cls").batched(args.batch))
    loader = wds.Loader(dataset, workers=args.workers, device="cuda", pin_memory=args.pin_memory,
                        decode_in_workers=args.decode_in_workers)
    # CUDA's context is made before the clock starts; the decoder (its nvJPEG
    # handles) is made at the first batch and timed there, where wds-bench
    # times it apart (gpu_init_s): compare the steady figures.
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    first = None
    first_at = None
    images = 0
    steady_images = 0
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        for batch, _ in loader:
            images += batch.shape[0]
            if first is None:
                torch.cuda.synchronize()
                first_at = time.perf_counter()
                first = first_at - start
            else:
                steady_images += batch.shape[0]
    torch.cuda.synchronize()
    end = time.perf_counter()
    seconds = end - start
    steady = steady_images / (end - first_at) if steady_images else 0.0
    print(json.dumps({"python_loader_cuda": True, "spec": args.spec, "crop224": args.crop224,
                      "workers": args.workers, "batch": args.batch, "epochs": args.epochs,
                      "pin_memory": args.pin_memory, "pinned": loader.pinned,
                      "decode_in_workers": args.decode_in_workers,
                      "samples": images, "seconds": round(seconds, 4),
                      "samples_per_s": round(images / seconds, 1),
                      "steady_samples_per_s": round(steady, 1),
                      "first_batch_s": round(first, 4), "decoder": loader.gpu_decoder.decoder,
                      "stats": loader.gpu_decoder.stats()}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("--images", type=int, default=8192)
    m.add_argument("--shards", type=int, default=16)
    m.add_argument("--out", required=True)
    t = sub.add_parser("torchvision")
    t.add_argument("--jpeg-dir", required=True)
    t.add_argument("--images", type=int, default=2048)
    t.add_argument("--batch", type=int, action="append")
    t.add_argument("--rounds", type=int, default=3)
    q = sub.add_parser("loader")
    q.add_argument("--shards", required=True)
    q.add_argument("--workers", type=int, default=3)
    q.add_argument("--batch", type=int, default=64)
    q.add_argument("--epochs", type=int, default=3)
    q.add_argument("--spec", default="rgb8")
    q.add_argument("--crop224", action="store_true")
    q.add_argument("--pin-memory", action="store_true",
                   help="pinned batches: the workers make the jobs in page-locked memory")
    q.add_argument("--decode-in-workers", action="store_true",
                   help="the workers decode each batch on the GPU (Loader(decode_in_workers=True))")
    args = p.parse_args()
    {"make": make, "torchvision": torchvision_baseline, "loader": python_loader}[args.command](args)


if __name__ == "__main__":
    main()
