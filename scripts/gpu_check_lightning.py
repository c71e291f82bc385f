"""The Lightning DataModule of docs/PYTHON.md, trained and resumed once.

Run by scripts/gpu_check.sh on the GPU machines, the only ones with Lightning:

    python3 scripts/gpu_check_lightning.py DIR first  ACCELERATOR DEVICES
    python3 scripts/gpu_check_lightning.py DIR resume ACCELERATOR DEVICES

"first" writes 4 shards of 64 JPEG samples into DIR (once), trains 6 steps with
strategy="ddp" and saves DIR/<accelerator>.ckpt; "resume" continues from it with
fit(ckpt_path=...) to step 12 and checks that Lightning handed the DataModule its
saved state. One fit per process: Lightning's DDP launcher re-runs this script
for the other ranks.
"""

import io
import os
import sys

import numpy as np
import torch
import lightning.pytorch as pl
import webdataset_cpp as wds
from PIL import Image


def make_shards(directory):
    rng = np.random.default_rng(0)
    for s in range(4):
        path = os.path.join(directory, f"train-{s:06d}.tar")
        if os.path.exists(path):
            continue
        with wds.TarWriter(path + ".tmp") as sink:
            for i in range(64):
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                jpeg = io.BytesIO()
                Image.fromarray(pixels).save(jpeg, format="JPEG", quality=90)
                sink.write({"__key__": f"{s:02d}{i:04d}", "jpg": jpeg.getvalue(), "cls": i % 10})
        os.replace(path + ".tmp", path)


class Shards(pl.LightningDataModule):
    def __init__(self, pattern):
        super().__init__()
        # docs/PYTHON.md's recipe, with a seed: an unseeded shuffle draws a new
        # order every run, which a state cannot replay.
        self.dataset = (wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node,
                                       seed=1)
                        .shuffle(100).decode("rgb8").to_tuple("jpg", "cls").batched(16))
        self.restored = False

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.dataset, batch_size=None, num_workers=0)

    def state_dict(self):
        # Lightning calls this on every rank and writes rank 0's result: a
        # job state (every rank's position) is what each rank can resume from.
        return {"data": wds.gather_state_dict(self.dataset)}

    def load_state_dict(self, state):
        self.dataset.load_state_dict(state["data"])
        self.restored = True


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32 * 32 * 3, 10)

    def training_step(self, batch, _):
        images, labels = batch
        x = torch.as_tensor(images).to(self.device).float().flatten(1) / 255
        y = torch.as_tensor(labels).to(self.device).long()
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main(directory, phase, accelerator, devices):
    os.makedirs(directory, exist_ok=True)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        make_shards(directory)
    data = Shards(os.path.join(directory, "train-{000000..000003}.tar"))
    trainer = pl.Trainer(accelerator=accelerator, devices=devices, strategy="ddp",
                         max_steps=6 if phase == "first" else 12, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=directory)
    checkpoint = os.path.join(directory, f"{accelerator}.ckpt")
    if phase == "first":
        trainer.fit(Classifier(), data)
        trainer.save_checkpoint(checkpoint)
        assert trainer.global_step == 6, trainer.global_step
    else:
        trainer.fit(Classifier(), data, ckpt_path=checkpoint)
        assert data.restored, "Lightning did not hand the DataModule its state"
        assert trainer.global_step == 12, trainer.global_step
    print(f"lightning {phase} {accelerator} x{devices}: rank {trainer.global_rank} "
          f"at step {trainer.global_step}, ok", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[2] not in ("first", "resume"):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
