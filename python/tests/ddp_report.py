"""The end of a rank of test_distributed's torchrun scripts (ddp_*.py)."""

import json
import os
import sys

import torch.distributed as dist


def finish(out_dir, rank, report):
    """Writes the rank's report as OUT_DIR/rank<rank>.json, waits for every
    rank, and leaves without destroy_process_group, which is reported to hang
    now and then (pytorch/pytorch#75097): the process's exit closes the
    connections."""
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
