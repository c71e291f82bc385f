"""One rank of test_distributed's torchrun jobs where agreed_steps must fail on
every rank together (a rank that raised alone would leave the others waiting
in the all-gather until the timeout).

Arguments: shard pattern, output directory, split, policy. Each rank writes
the error agreed_steps raised (or the steps it returned)."""

import datetime
import faulthandler
import sys

import torch.distributed as dist

import ddp_report
import webdataset_cpp as wds


def main(pattern, out_dir, split, policy):
    faulthandler.dump_traceback_later(50)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    dataset = (wds.WebDataset(pattern, shardshuffle=False, nodesplitter=wds.split_by_node,
                              split=split, empty_check=False)
               .decode().to_tuple("cls", "__key__").batched(2))
    report = {"rank": rank}
    for allow_empty in (False, True):
        try:
            report[f"steps{int(allow_empty)}"] = wds.agreed_steps(
                dataset, num_workers=1, policy=policy, allow_empty=allow_empty)
        except ValueError as e:
            report[f"error{int(allow_empty)}"] = str(e)
    ddp_report.finish(out_dir, rank, report)


if __name__ == "__main__":
    main(*sys.argv[1:])
