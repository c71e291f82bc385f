#!/usr/bin/env python3
"""The GPU benchmark's figures from one gpu_check.sh run, side by side, with
issue 21's targets: scripts/gpu_figures.py LOG_DIR (gpu_check's logs: the
JSON objects of nvjpeg_bench, torchvision, wds-bench and the Python loader).
Missing files or fields print as "-": a run cut short still shows the rest.
Standard library only (it runs on the GPU machines' python3)."""
import json
import os
import sys


def load(logs, name):
    try:
        with open(os.path.join(logs, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return {}


def num(x):
    return "-" if x is None else f"{x:,.0f}"


def ratio(a, b):
    return "-" if not a or not b else f"{a / b:.2f}"


def per_batch(stats):
    """A decoder's stats() (wds-bench's gpu_stats, the Python loader's stats):
    its phases in ms per batch, as text; "" without them."""
    if not stats or not stats.get("batches") or "seconds" not in stats:
        return ""
    return ", ".join(f"{k} {1000 * v / stats['batches']:.3f}" for k, v in stats["seconds"].items())


def main(logs):
    nvjpeg = load(logs, "bench-nvjpeg.json")
    torchvision = load(logs, "bench-torchvision.json")
    runs = {name: load(logs, f"bench-{name}.json") for name in (
        "cuda-full-b64", "cuda-full-b256", "cuda-full-b64-pinned", "cuda-full-b256-pinned",
        "cuda-crop224-b64", "cuda-full-b64-workers", "cuda-full-b256-workers",
        "cuda-crop224-b64-workers", "cpu-16w-b64", "cpu-16w-crop224-b64", "python-cuda-full-b64",
        "python-cuda-full-b64-pinned", "python-cuda-full-b64-workers")}
    steady = {k: v.get("steady_samples_per_s") for k, v in runs.items()}
    print(f"GPU figures ({nvjpeg.get('gpu', '?')}; decoder: {nvjpeg.get('decoder', '?')}), images/s")
    for batch in (64, 256):
        b = nvjpeg.get(f"batch{batch}", {})
        raw = b.get("raw_nvjpeg_hardware_img_s") or b.get("raw_nvjpeg_hybrid_img_s")
        print(f"  batch {batch}: raw {num(raw)}, from pageable {num(b.get('raw_from_pageable_img_s'))}, "
              f"chroma interpolated {num(b.get('raw_chroma_interpolated_img_s'))}; decoder "
              f"{num(b.get('decoder_full_size_img_s'))} ({ratio(b.get('decoder_full_size_img_s'), raw)} "
              f"of raw), unstaged {num(b.get('decoder_unstaged_full_size_img_s'))}, crop224 "
              f"{num(b.get('decoder_crop224_float_img_s'))}; torchvision "
              f"{num(torchvision.get(f'torchvision_decode_jpeg_cuda_batch{batch}_img_s'))}")
        for key in ("decoder_ms_per_batch", "decoder_unstaged_ms_per_batch"):
            if key in b:
                print(f"    {key}: " + ", ".join(f"{k} {v}" for k, v in b[key].items()))
        run = runs[f"cuda-full-b{batch}"]
        print(f"  loader b{batch}: {num(run.get('samples_per_s'))} (steady {num(steady[f'cuda-full-b{batch}'])}), "
              f"{ratio(steady[f'cuda-full-b{batch}'], raw)} of raw (target 0.85); first batch "
              f"{run.get('first_batch_s', '-')} s after a {run.get('gpu_init_s', '-')} s set-up (target 0.3)")
        phases = per_batch(run.get("gpu_stats"))
        if phases:
            print(f"    consumer ms per batch: {phases}; waiting share "
                  f"{run.get('shares', {}).get('waiting', '-')}")
        # The variants beside the consumer's decode: what else each prints, and
        # whose time its phases are.
        for variant, label, extra, whose in (
                ("pinned", "pinned jobs read in place",
                 lambda r: f"pool pinned: {json.dumps(r.get('pool', {}).get('pinned', '-'))}",
                 "consumer"),
                ("workers", "decoded in the workers",
                 lambda r: f"{r.get('gpu_decoders', '-')} decoders; waiting share "
                           f"{r.get('shares', {}).get('waiting', '-')}",
                 "workers' decoders (summed over threads)")):
            name = f"cuda-full-b{batch}-{variant}"
            print(f"  loader b{batch}, {label}: steady {num(steady[name])}, "
                  f"{ratio(steady[name], raw)} of raw ({extra(runs[name])})")
            phases = per_batch(runs[name].get("gpu_stats"))
            if phases:
                print(f"    {whose} ms per batch: {phases}")
    python_phases = per_batch(runs["python-cuda-full-b64"].get("stats"))
    if python_phases:
        print(f"  Python b64 consumer ms per batch: {python_phases}")
    raw64 = nvjpeg.get("batch64", {}).get("raw_nvjpeg_hardware_img_s")
    tv64 = torchvision.get("torchvision_decode_jpeg_cuda_batch64_img_s")
    print(f"  crop224 loader: steady {num(steady['cuda-crop224-b64'])}, decoded in the workers "
          f"{num(steady['cuda-crop224-b64-workers'])}; CPU 16 workers: steady "
          f"{num(steady['cpu-16w-b64'])}, crop224 {num(steady['cpu-16w-crop224-b64'])}")
    print(f"  targets at b64 (steady): {ratio(steady['cuda-full-b64'], raw64)} of raw (0.85); "
          f"{ratio(steady['cuda-full-b64'], steady['cpu-16w-b64'])}x the CPU path (2.6), "
          f"crop224 {ratio(steady['cuda-crop224-b64'], steady['cpu-16w-crop224-b64'])}x; "
          f"{ratio(steady['cuda-full-b64'], tv64)}x torchvision (> 1); Python "
          f"{ratio(steady['python-cuda-full-b64'], steady['cuda-full-b64'])} of C++ (0.95), "
          f"pinned {ratio(steady['python-cuda-full-b64-pinned'], steady['cuda-full-b64-pinned'])}, "
          f"decoded in the workers "
          f"{ratio(steady['python-cuda-full-b64-workers'], steady['cuda-full-b64-workers'])}")
    best = max((steady[k] for k in ('cuda-full-b64', 'cuda-full-b64-pinned',
                                    'cuda-full-b64-workers') if steady[k]), default=None)
    print(f"  best b64 loader: {num(best)}, {ratio(best, raw64)} of raw; "
          f"{ratio(best, steady['cpu-16w-b64'])}x the CPU path; crop224 decoded in the workers "
          f"{ratio(steady['cuda-crop224-b64-workers'], steady['cpu-16w-crop224-b64'])}x")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gpu_figures.py LOG_DIR")
    main(sys.argv[1])
