#!/usr/bin/env python3
"""GPU decode baselines on a GPU machine: torchvision's batched
decode_jpeg(device="cuda") alone, on the JPEGs of an ImageNet-like set
(500x375, quality 90), in images/s. The bytes are in host memory before the
clock starts, so only the decode (and its host-to-device copy) is timed.

    scripts/gpu_baselines.py --images 1024 --batch 64 --batch 256 [--jpeg-dir DIR]

Without --jpeg-dir it makes the JPEGs with PIL (smooth gradients plus noise,
so they compress like photographs rather than flat colour).
"""
import argparse
import io
import json
import os
import time

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision.io import decode_jpeg


def make_jpegs(count, width, height, quality, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    out = []
    for i in range(count):
        phase = rng.uniform(0, 6.28, size=3)
        base = np.stack([127 + 100 * np.sin(x / (40 + 7 * c) + y / (55 + 5 * c) + phase[c])
                         for c in range(3)], axis=-1)
        noise = rng.normal(0, 18, size=base.shape)
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
        out.append(buf.getvalue())
    return out


def time_torchvision(jpegs, batch, rounds):
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--batch", type=int, action="append")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jpeg-dir")
    p.add_argument("--save-dir", help="write the generated JPEGs here")
    args = p.parse_args()
    if args.jpeg_dir:
        names = sorted(os.listdir(args.jpeg_dir))[: args.images]
        jpegs = [open(os.path.join(args.jpeg_dir, n), "rb").read() for n in names]
    else:
        jpegs = make_jpegs(args.images, 500, 375, 90)
    if args.save_dir:
        os.makedirs(args.save_dir, exist_ok=True)
        for i, j in enumerate(jpegs):
            with open(os.path.join(args.save_dir, f"{i:06d}.jpg"), "wb") as f:
                f.write(j)
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "torchvision": torchvision.__version__, "images": len(jpegs),
              "mean_jpeg_bytes": int(sum(map(len, jpegs)) / len(jpegs))}
    for batch in args.batch or [64, 256]:
        result[f"torchvision_decode_jpeg_cuda_batch{batch}_img_s"] = round(
            time_torchvision(jpegs, batch, args.rounds))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
