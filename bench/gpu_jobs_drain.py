#!/usr/bin/env python3
"""The workers' side of decoding on the GPU, on a machine without one: a
wds.Loader over .decode("rgb8", device="cuda") drained without decoding (the
jobs the workers make, batched), three times, with the process's CPU time and
minor page faults.

    PYTHONPATH=build/python /usr/bin/python3 bench/gpu_jobs_drain.py 'shards-{000000..000003}.tar'
"""
import resource
import sys
import time

import webdataset_cpp as wds


def main(pattern, workers=2, rounds=3):
    for _ in range(rounds):
        ds = (wds.WebDataset(pattern, shardshuffle=False).decode("rgb8", device="cuda")
              .to_tuple("jpg", "cls").batched(64))
        core = wds.Loader(ds, workers=workers)._core  # batches as made: jobs, not decoded
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        images = 0
        while (item := core.next()) is not None:
            images += len(item[0])
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        print(f"{images} images, {images / seconds:.0f} images/s, "
              f"user {after.ru_utime - before.ru_utime:.2f} s, "
              f"sys {after.ru_stime - before.ru_stime:.2f} s, "
              f"minor faults {after.ru_minflt - before.ru_minflt}")


if __name__ == "__main__":
    main(sys.argv[1])
