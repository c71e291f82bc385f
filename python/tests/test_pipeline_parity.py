"""DataPipeline as the reference (webdataset 1.0.2) runs it: stopping handlers,
the stages' own errors, with_epoch counted per DataLoader worker, and every
filter of the reference's `filters` module as a stage. The expected values
were observed with the reference on the same inputs."""

import io
import itertools
import os

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import webdataset_cpp as wds
from webdataset_cpp import filters
from conftest import write_shards

KEYS = [f"s0_{i:03d}" for i in range(5)]
STOPS = [wds.ignore_and_stop, wds.warn_and_stop]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Two shards of 5 samples (cls, txt, json) and a file that is no tar."""
    directory = tmp_path_factory.mktemp("parity")
    good = write_shards(directory, 2, 5, jpeg=False)
    corrupt = os.path.join(directory, "corrupt.tar")
    with open(corrupt, "wb") as f:
        f.write(b"not a tar archive" * 100)
    return {"good": good, "corrupt": corrupt}


def keys(items):
    return [s["__key__"] for s in items]


def stopping(urls, handler, *stages):
    return wds.DataPipeline(wds.SimpleShardList(urls), wds.split_by_node, wds.split_by_worker,
                            wds.tarfile_to_samples(handler=handler), *stages)


# ------------------------------------------------ stopping handlers


@pytest.mark.parametrize("handler", STOPS)
def test_a_stopping_handler_ends_the_pipeline_quietly_with_what_it_read(small, handler, recwarn):
    assert keys(stopping(small["corrupt"], handler)) == []
    assert keys(stopping([small["good"][0], small["corrupt"], small["good"][1]], handler)) == KEYS
    through_python = wds.DataPipeline(wds.SimpleShardList(small["corrupt"]), lambda src: src,
                                      wds.tarfile_to_samples(handler=handler))
    assert keys(through_python) == []
    assert list(stopping(small["corrupt"], handler, wds.to_tuple("txt"), wds.batched(2))) == []
    if handler is wds.warn_and_stop:
        assert any("corrupt.tar" in str(w.message) for w in recwarn)


@pytest.mark.parametrize("handler", STOPS)
def test_a_stopping_handler_under_with_epoch_ends_a_worker_without_data(small, handler,
                                                                         monkeypatch):
    monkeypatch.setenv("WORKER", "1")
    monkeypatch.setenv("NUM_WORKERS", "2")
    # worker 1 of 2 gets no shard of one; its epoch is empty, as in the reference
    assert keys(stopping(small["good"][0], handler).with_epoch(3)) == []
    assert keys(stopping(small["corrupt"], handler).with_epoch(3)) == []


def test_no_samples_found_is_webdatasets_empty_check_only(small):
    with pytest.raises(ValueError, match=r"^No samples found in dataset"):
        list(wds.WebDataset(small["corrupt"], handler=wds.ignore_and_stop, shardshuffle=False))
    assert list(wds.WebDataset(small["corrupt"], handler=wds.ignore_and_stop, shardshuffle=False,
                               empty_check=False)) == []


@pytest.mark.parametrize("handler", STOPS)
@pytest.mark.parametrize("stage,message", [
    (lambda: wds.to_tuple("nope"), r'to_tuple: no field "nope"'),
    (lambda: wds.rename(x="nope"), r'rename: no field "nope" to rename to "x"'),
])
def test_a_missing_key_is_the_stages_error_not_the_source_handlers(small, handler, stage,
                                                                   message):
    for tail in ([stage()], [wds.map(lambda s: s), stage()], [wds.decode(), stage(),
                                                             wds.batched(2)]):
        with pytest.raises(ValueError, match=rf"shard-000000\.tar: key s0_000: {message}"):
            list(stopping(small["good"], handler, *tail))


# ------------------------------------------------ with_epoch


def batches_pipeline(small, *extra):
    return wds.DataPipeline(wds.SimpleShardList(small["good"]), wds.split_by_worker,
                            wds.tarfile_to_samples(), wds.to_tuple("txt"), wds.batched(3),
                            *extra)


def test_with_epoch_after_batched_counts_batches(small):
    # 10 samples per pass: batches of 3, 3, 3, 1, then a new pass
    sizes = [len(b[0]) for b in batches_pipeline(small).with_epoch(7)]
    assert sizes == [3, 3, 3, 1, 3, 3, 3]
    assert len(list(batches_pipeline(small).with_epoch(nbatches=2))) == 2
    assert [len(b[0]) for b in batches_pipeline(small, wds.map(lambda b: b)).with_epoch(7)] == sizes


class _WorkerTagged(torch.utils.data.IterableDataset):
    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        worker = torch.utils.data.get_worker_info().id
        return ((worker, len(b[0])) for b in self.dataset)


def test_with_epoch_counts_per_dataloader_worker_as_the_reference(small):
    loader = DataLoader(_WorkerTagged(batches_pipeline(small).with_epoch(4)), batch_size=None,
                        num_workers=2, multiprocessing_context="fork")
    got = list(loader)
    assert [w for w, _ in got] == [0, 1] * 4
    assert [n for _, n in got] == [3, 3, 2, 2] + [3, 3, 2, 2]  # each worker: 3, 2, then a new pass


def test_with_epoch_across_workers_is_this_ranks_total(small):
    ds = batches_pipeline(small).with_epoch(5, across_workers=True)
    loader = DataLoader(_WorkerTagged(ds), batch_size=None, num_workers=2,
                        multiprocessing_context="fork")
    assert [w for w, _ in loader] == [0, 1, 0, 1, 0]
    assert len(ds) == 5
    with pytest.raises(TypeError, match=r"use \.with_length\(n\) or "
                                        r"\.with_epoch\(n, across_workers=True\)"):
        len(batches_pipeline(small).with_epoch(5))


def test_a_state_is_not_restored_into_the_other_counting(small):
    per_worker = wds.WebDataset(small["good"], shardshuffle=False).with_epoch(4)
    it = iter(per_worker)
    next(it)
    state = per_worker.state_dict()
    across = wds.WebDataset(small["good"], shardshuffle=False).with_epoch(4, across_workers=True)
    with pytest.raises(ValueError, match="the state was taken with another pipeline"):
        across.load_state_dict(state)
    restored = wds.WebDataset(small["good"], shardshuffle=False).with_epoch(4)
    restored.load_state_dict(state)
    assert keys(restored) == KEYS[1:4]


def test_repeat_with_nbatches_and_no_epoch_count_stops_at_nbatches():
    source = [{"__key__": str(i)} for i in range(5)]
    assert len(list(itertools.islice(wds.DataPipeline([source]).repeat(nbatches=3), 50))) == 3
    assert len(list(wds.DataPipeline([source]).repeat(2))) == 10


# ------------------------------------------------ the reference's filters as stages


def samples():
    return [{"__key__": f"k{i}", "txt": f"t{i}", "cls": i} for i in range(6)]


def encoded():
    return [{"__key__": f"k{i}", "txt": f"t{i}".encode(), "cls": str(i).encode()}
            for i in range(4)]


def plain(x):
    """Batches compared as lists (the reference collates ints to NumPy)."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    return x


def dicts(*fields):
    return [{k: v for k, v in s.items() if k in fields} for s in samples()]


FILTER_CASES = {
    "info": (samples, lambda: filters.info(stream=io.StringIO()), samples()),
    "select": (samples, lambda: filters.select(lambda s: s["cls"] % 2 == 0), samples()[::2]),
    "log_keys": (samples, lambda: filters.log_keys(), samples()),
    "map": (samples, lambda: filters.map(lambda s: s["cls"] * 10), [0, 10, 20, 30, 40, 50]),
    "rename": (samples, lambda: filters.rename(label="cls"),
               [{"__key__": f"k{i}", "txt": f"t{i}", "label": i} for i in range(6)]),
    "associate": (samples, lambda: filters.associate(lambda k: {"extra": k}),
                  [{**s, "extra": s["__key__"]} for s in samples()]),
    "map_dict": (samples, lambda: filters.map_dict(cls=lambda c: c + 100),
                 [{**s, "cls": s["cls"] + 100} for s in samples()]),
    "to_tuple": (samples, lambda: filters.to_tuple("txt", "cls"),
                 [(f"t{i}", i) for i in range(6)]),
    "map_tuple": (lambda: [(i, f"t{i}") for i in range(3)],
                  lambda: filters.map_tuple(lambda c: c * 2, str.upper),
                  [(0, "T0"), (2, "T1"), (4, "T2")]),
    "batched": (samples, lambda: filters.batched(4),
                [{"__key__": ["k0", "k1", "k2", "k3"], "txt": ["t0", "t1", "t2", "t3"],
                  "cls": [0, 1, 2, 3]},
                 {"__key__": ["k4", "k5"], "txt": ["t4", "t5"], "cls": [4, 5]}]),
    "batched lists": (samples, lambda: filters.batched(4, collation_fn=None),
                      [samples()[:4], samples()[4:]]),
    "batched whole": (samples, lambda: filters.batched(4, partial=False),
                      [{"__key__": ["k0", "k1", "k2", "k3"], "txt": ["t0", "t1", "t2", "t3"],
                        "cls": [0, 1, 2, 3]}]),
    "unlisted": (lambda: [samples()[:2], samples()[2:3]], lambda: filters.unlisted(),
                 samples()[:3]),
    "unbatched": (lambda: [([0, 1], ["a", "b"])], lambda: filters.unbatched(),
                  [(0, "a"), (1, "b")]),
    "rsample": (samples, lambda: filters.rsample(1.0), samples()),
    "slice": (samples, lambda: filters.slice(1, 5, 2), [samples()[1], samples()[3]]),
    "slice stop": (samples, lambda: filters.slice(2), samples()[:2]),
    "extract_keys": (samples, lambda: filters.extract_keys("txt", "cls"),
                     [(f"t{i}", i) for i in range(6)]),
    "rename_keys": (samples, lambda: filters.rename_keys(label="cls", text="txt"),
                    [{"text": f"t{i}", "label": i} for i in range(6)]),
    "xdecode": (encoded, lambda: filters.xdecode(txt=lambda s: s.read().decode() + "!",
                                                 cls=lambda s: int(s.read())),
                [{"__key__": f"k{i}", "txt": f"t{i}!", "cls": i} for i in range(4)]),
    "decode": (encoded, lambda: filters.decode(),
               [{"__key__": f"k{i}", "txt": f"t{i}", "cls": i} for i in range(4)]),
    "Cached": (samples, lambda: filters.Cached(), samples()),
    # the generator functions themselves, called by a plain function stage
    "_map": (samples, lambda: lambda src: filters._map(src, lambda s: s["__key__"]),
             [f"k{i}" for i in range(6)]),
    "_select": (samples, lambda: lambda src: filters._select(src, lambda s: s["cls"] > 3),
                samples()[4:]),
    "_to_tuple": (samples, lambda: lambda src: filters._to_tuple(src, "cls"),
                  [(i,) for i in range(6)]),
    "_batched": (samples, lambda: lambda src: filters._batched(src, 4, collation_fn=None),
                 [samples()[:4], samples()[4:]]),
    "_unbatched": (lambda: [([0, 1], ["a", "b"])], lambda: filters._unbatched,
                   [(0, "a"), (1, "b")]),
}


@pytest.mark.parametrize("name", sorted(FILTER_CASES))
def test_each_filter_of_the_reference_is_a_pipeline_stage(name):
    source, stage, expected = FILTER_CASES[name]
    assert plain(list(wds.DataPipeline([source()], stage()))) == expected


@pytest.mark.parametrize("stage", [lambda: filters.shuffle(3, initial=2),
                                   lambda: filters.detshuffle(3, initial=2, seed=1)])
def test_shuffles_are_stages_that_permute(stage):
    assert sorted(keys(wds.DataPipeline([samples()], stage()))) == keys(samples())


def test_resampled_is_a_stage_drawing_n_with_replacement():
    got = keys(wds.DataPipeline([samples()], wds.resampled(9)))
    assert len(got) == 9 and set(got) <= set(keys(samples()))


# ------------------------------------------------ the planner asks stages what they are


class HoldsItems:
    """A user stage declaring that it holds items between its outputs."""

    _wds_kind = "holds"

    def __call__(self, src):
        yield from src


def test_a_stage_declaring_it_holds_items_makes_the_position_unrecordable(small):
    ds = wds.WebDataset(small["good"], shardshuffle=False).compose(HoldsItems())
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    assert state["resumable"] is False
    assert state["reason"] == ("HoldsItems holds items between its outputs, which a state "
                               "cannot record")
