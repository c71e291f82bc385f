"""A client written for the reference webdataset 1.0.2, run unchanged through
install_as_webdataset(): the shape of OpenCLIP's training data code
(open_clip_train/data.py, get_wds_dataset), restated here in its own words.
Its training pipeline shuffles shards with filters._shuffle and a seeded
random.Random, groups members with its own generator over the tariterators
steps, and sizes each DataLoader worker's epoch with with_epoch(n per worker);
its validation pipeline reads each worker's shards in order.

The expected numbers and orders are the reference's, observed on the same
shards: with 2 workers the training epoch has 2 x 8 batches (7 full batches of
a worker's 30 samples, then one from a fresh pass), and 1.0.2's end-of-shard marker makes a
grouping that reads every item's "fname" fail with KeyError, as it does there.
"""

import io
import os
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import PIL.Image
import pytest

pytest.importorskip("torch")

SHARDS, PER_SHARD, BATCH = 6, 10, 4


@pytest.fixture(scope="module")
def captioned_shards(tmp_path_factory):
    """Six shards of ten samples, each a JPEG and a caption naming the sample."""
    directory = tmp_path_factory.mktemp("captioned")
    index = 0
    for shard in range(SHARDS):
        with tarfile.open(directory / f"data-{shard:06d}.tar", "w") as tar:
            for _ in range(PER_SHARD):
                image = io.BytesIO()
                PIL.Image.fromarray(np.full((8, 8, 3), index, np.uint8)).save(image, "JPEG")
                for ext, data in (("jpg", image.getvalue()), ("txt", f"sample {index}".encode())):
                    info = tarfile.TarInfo(f"s{index:05d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                index += 1
    return str(directory / "data-{000000..000005}.tar")


CLIENT = textwrap.dedent("""
    import math, random, sys
    import webdataset_cpp
    webdataset_cpp.install_as_webdataset()

    import torch
    import webdataset as wds
    from webdataset.filters import _shuffle
    from webdataset.tariterators import base_plus_ext, url_opener, tar_file_expander, valid_sample

    def skip_errors(exn):
        return True

    def grouped(files):
        # The client's own grouping: it reads "fname" of every item.
        sample = None
        for item in files:
            prefix, suffix = base_plus_ext(item["fname"])
            if prefix is None:
                continue
            if sample is None or prefix != sample["__key__"] or suffix in sample:
                if valid_sample(sample):
                    yield sample
                sample = dict(__key__=prefix, __url__=item["__url__"])
            sample[suffix.lower()] = item["data"]
        if valid_sample(sample):
            yield sample

    def samples_of(src, eof_value):
        streams = url_opener(src, handler=skip_errors)
        kw = {} if eof_value == "default" else dict(eof_value=None)
        return grouped(tar_file_expander(streams, handler=skip_errors, **kw))

    class SeededShardShuffle(wds.PipelineStage):
        def __init__(self, seed, epoch):
            self.seed, self.epoch = seed, epoch

        def run(self, src):
            return _shuffle(src, 2000, 500, random.Random(self.seed + self.epoch))

    def caption_number(text):
        return torch.tensor([int(text.split()[1])])

    def loader(pattern, train, workers, eof_value, samples=60, batch=4):
        stages = [wds.SimpleShardList(pattern)]
        if train:
            stages += [SeededShardShuffle(0, 0), wds.split_by_node, wds.split_by_worker,
                       lambda src: samples_of(src, eof_value), wds.shuffle(5000, 1000)]
        else:
            stages += [wds.split_by_worker, wds.tarfile_to_samples(handler=skip_errors)]
        stages += [wds.decode("pilrgb", handler=skip_errors),
                   wds.rename(image="jpg;png", text="txt"),
                   wds.map_dict(image=lambda img: torch.tensor(img.size), text=caption_number),
                   wds.to_tuple("image", "text"), wds.batched(batch, partial=not train)]
        dataset = wds.DataPipeline(*stages)
        if train:
            per_worker = math.ceil(math.ceil(samples / batch) / max(1, workers))
            dataset = dataset.with_epoch(per_worker)
        return wds.WebLoader(dataset, batch_size=None, shuffle=False, num_workers=workers,
                             persistent_workers=workers > 0)

    pattern, split, workers, eof_value = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    try:
        numbers = [torch.cat([t for _, t in [b]]).flatten().tolist()
                   for b in loader(pattern, split == "train", workers, eof_value)]
    except KeyError as e:
        print("KeyError", e)
    else:
        print(len(numbers), [n for batch in numbers for n in batch])
""")


def run_client(tmp_path, pattern, split, workers, eof_value="none"):
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    result = subprocess.run([sys.executable, str(script), pattern, split, str(workers), eof_value],
                            capture_output=True, text=True, env=dict(os.environ), timeout=240)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def parse(output):
    count, numbers = output.split(" ", 1)
    return int(count), eval(numbers)


@pytest.mark.parametrize("workers", [0, 2])
def test_validation_reads_every_sample_in_the_references_order(tmp_path, captioned_shards,
                                                                  workers):
    batches, numbers = parse(run_client(tmp_path, captioned_shards, "val", workers))
    if workers == 0:
        assert (batches, numbers) == (15, list(range(60)))
        return
    # Worker w reads shards w, w + 2, w + 4 in batches of 4 (partial at its end);
    # the DataLoader takes one batch from each worker in turn.
    per_worker = [[n for shard in range(w, SHARDS, 2) for n in range(10 * shard, 10 * shard + 10)]
                  for w in range(2)]
    chunks = [[s[i:i + BATCH] for i in range(0, 30, BATCH)] for s in per_worker]
    expected = [n for pair in zip(*chunks) for chunk in pair for n in chunk]
    assert (batches, numbers) == (16, expected)


@pytest.mark.parametrize("workers", [0, 2])
def test_training_runs_the_epoch_the_client_sized_per_worker(tmp_path, captioned_shards, workers):
    batches, numbers = parse(run_client(tmp_path, captioned_shards, "train", workers))
    if workers == 0:
        # ceil(60 / 4) = 15 batches: every sample once.
        assert batches == 15 and sorted(numbers) == list(range(60))
        return
    # ceil(15 / 2) = 8 batches per worker, 16 in all (the reference's count; a
    # count over all workers would give the client 8, half its epoch).
    assert batches == 16 and len(numbers) == 64
    # A worker's first pass makes 7 full batches of its 30 samples (partial=False
    # drops 2); its 8th batch comes from a fresh pass. So the first 14 batches
    # hold 56 different samples, as with the reference.
    assert len(set(numbers[:56])) == 56 and set(numbers) <= set(range(60))


def test_the_end_of_shard_marker_breaks_a_grouping_that_reads_fname_as_in_the_reference(
        tmp_path, captioned_shards):
    assert run_client(tmp_path, captioned_shards, "train", 0, eof_value="default") == \
        "KeyError 'fname'"
