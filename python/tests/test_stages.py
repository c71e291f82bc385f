"""The stages and fluent methods, epochs and handlers."""

import pickle
import re

import numpy as np
import pytest

import webdataset_cpp as wds


def samples(n, url="mem.tar"):
    return [{"__key__": f"k{i}", "__url__": url, "cls": i} for i in range(n)]


def keys(items):
    return [s["__key__"] for s in items]


def test_shuffle_is_a_seeded_permutation():
    def order(seed, epoch=0):
        ds = wds.DataPipeline([samples(50)], wds.shuffle(20, initial=5))
        ds.seed, ds.epoch = seed, epoch
        return keys(ds)

    first = order(1)
    assert sorted(first) == sorted(keys(samples(50))) and first != keys(samples(50))
    assert order(1) == first and order(2) != first and order(1, epoch=1) != first
    def fixed():
        return wds.DataPipeline([samples(50)], wds.shuffle(20, seed=7))

    assert keys(fixed()) == keys(fixed()) != first
    assert keys(wds.DataPipeline([samples(5)], wds.shuffle(0))) == keys(samples(5))


def test_fluent_shuffle_below_one_returns_the_same_object(shards):
    ds = wds.WebDataset(shards, shardshuffle=False)
    assert ds.shuffle(0) is ds
    assert ds.shuffle(10) is not ds and len(ds.shuffle(10).pipeline) == len(ds.pipeline) + 1


def test_map_map_dict_map_tuple_select():
    out = list(wds.DataPipeline(
        [samples(6)],
        wds.map(lambda s: None if s["cls"] == 2 else {"cls": s["cls"] * 10}),
        wds.map_dict(cls=lambda c: c + 1),
        wds.select(lambda s: s["cls"] != 11)))
    assert out == [{"cls": 1, "__key__": "k0"}, {"cls": 31, "__key__": "k3"},
                   {"cls": 41, "__key__": "k4"}, {"cls": 51, "__key__": "k5"}]
    no_key = list(wds.map(lambda s: dict(s))(iter([{"a": 1}])))
    assert no_key == [{"a": 1}]  # unlike the reference, no "__key__": None is added
    tuples = list(wds.map_tuple(lambda x: x * 2, None)(iter([(1, "a", 9), (2, "b", 8)])))
    assert tuples == [(2, "a", 9), (4, "b", 8)]
    with pytest.raises(ValueError, match="map_dict needs at least one field=function"):
        list(wds.map_dict()(iter([{}])))


def test_to_tuple_and_rename():
    s = [{"__key__": "a", "png": b"P", "cls": 1}, {"__key__": "b", "jpg": b"J", "cls": 2}]
    assert list(wds.to_tuple("jpg;png", "cls")(iter(s))) == [(b"P", 1), (b"J", 2)]
    assert list(wds.to_tuple("jpg;png cls")(iter(s))) == [(b"P", 1), (b"J", 2)]
    assert list(wds.to_tuple("cls", "cls")(iter(s))) == [(1, 1), (2, 2)]
    assert list(wds.to_tuple("jpg", "cls", missing_is_error=False)(iter(s))) == [(None, 1),
                                                                                  (b"J", 2)]
    renamed = list(wds.rename(image="jpg;png", label="cls")(iter(s)))
    assert renamed == [{"__key__": "a", "image": b"P", "label": 1},
                       {"__key__": "b", "image": b"J", "label": 2}]
    only = list(wds.rename(keep=False, label="cls")(iter([dict(s[0], txt=b"t")])))
    assert only == [{"label": 1}]  # as the reference: no __key__ either


def test_missing_fields_name_the_sample():
    s = [{"__key__": "a", "__url__": "x.tar", "jpg": b""}]
    with pytest.raises(wds.DataError) as e:
        list(wds.to_tuple("png", "jpg")(iter(s)))
    assert str(e.value) == ('x.tar: key a: to_tuple: no field "png" (fields present: __key__, '
                            '__url__, jpg)')
    with pytest.raises(wds.DataError) as e:
        list(wds.rename(image="png")(iter(s)))
    assert str(e.value) == ('x.tar: key a: rename: no field "png" to rename to "image" (fields '
                            'present: __key__, __url__, jpg)')
    # A callable handler runs the stage in Python; it sees the same kind of error.
    seen = []
    assert list(wds.to_tuple("png", handler=lambda exn: seen.append(exn) or True)(iter(s))) == []
    assert [type(x) for x in seen] == [wds.DataError]
    assert str(seen[0]) == "x.tar: key a: no field 'png' (fields present: __key__, __url__, jpg)"


def test_slice():
    assert keys(wds.slice(3)(iter(samples(10)))) == ["k0", "k1", "k2"]
    assert keys(wds.slice(2, 9, 3)(iter(samples(10)))) == ["k2", "k5", "k8"]
    assert keys(wds.slice(5, 2)(iter(samples(10)))) == []
    with pytest.raises(ValueError, match="slice: start must be None or an int >= 0, got -1"):
        wds.slice(-1, 3)


def test_handlers_in_python_stages():
    def fail_on_2(s):
        if s["cls"] == 2:
            raise ValueError("two")
        return s

    def run(handler):
        return keys(wds.map(fail_on_2, handler=handler)(iter(samples(5))))

    with pytest.raises(ValueError, match="^two$"):
        run(wds.reraise_exception)
    assert run(wds.ignore_and_continue) == ["k0", "k1", "k3", "k4"]
    assert run(wds.ignore_and_stop) == ["k0", "k1"]
    with pytest.warns(UserWarning, match=r"ValueError\('two'\)"):
        assert run(wds.warn_and_continue) == ["k0", "k1", "k3", "k4"]
    with pytest.warns(UserWarning, match=r"ValueError\('two'\)"):
        assert run(wds.warn_and_stop) == ["k0", "k1"]
    assert run(lambda exn: str(exn) == "two") == ["k0", "k1", "k3", "k4"]


def test_python_generators_between_native_stages(shards):
    def add_double(src):
        for sample in src:
            sample["double"] = 2 * sample["cls"]
            yield sample

    ds = (wds.WebDataset(shards, shardshuffle=False).decode().compose(add_double)
          .shuffle(5).to_tuple("cls", "double").batched(8))
    batches = list(ds)
    labels = np.concatenate([b[0] for b in batches])
    assert sorted(labels.tolist()) == sorted([i % 10 for i in range(40)])
    assert all((b[1] == 2 * b[0]).all() for b in batches)


def test_exceptions_in_python_stages_reach_the_caller_unchanged(shards):
    class Mine(Exception):
        pass

    def explode(src):
        for i, sample in enumerate(src):
            if i == 3:
                raise Mine("from a Python stage")
            yield sample

    ds = wds.WebDataset(shards, shardshuffle=False).compose(explode).shuffle(5).batched(2)
    with pytest.raises(Mine, match="^from a Python stage$") as e:
        list(ds)
    assert "explode" in "".join(__import__("traceback").format_tb(e.value.__traceback__))


def test_with_epoch_counts_items_per_worker_and_continues_into_new_passes(shards, monkeypatch):
    ds = wds.WebDataset(shards, shardshuffle=False).with_epoch(55)
    got = keys(ds)
    assert len(got) == 55 and got[:40] == keys(wds.WebDataset(shards, shardshuffle=False))
    assert got[40:] == got[:15]
    monkeypatch.setenv("WORKER", "1")
    monkeypatch.setenv("NUM_WORKERS", "2")
    assert len(keys(wds.WebDataset(shards, shardshuffle=False).with_epoch(7))) == 7
    across = wds.WebDataset(shards, shardshuffle=False).with_epoch(7, across_workers=True)
    assert len(across) == 7
    assert len(keys(across)) == 3  # worker 1 of 2 yields items 1, 3, 5 of 7
    monkeypatch.delenv("WORKER")
    monkeypatch.delenv("NUM_WORKERS")
    python_stage = wds.WebDataset(shards, shardshuffle=False).map(lambda s: s).with_epoch(45)
    assert keys(python_stage) == got[:45]


def test_with_epoch_on_empty_data_ends_as_the_reference_or_is_an_error_across_workers():
    assert list(wds.DataPipeline([[]], wds.map(lambda s: s)).with_epoch(3)) == []
    ds = wds.DataPipeline([[]], wds.map(lambda s: s)).with_epoch(3, across_workers=True)
    with pytest.raises(ValueError, match=r"^with_epoch\(3, across_workers=True\): pass 0 of "
                                         r"this worker's data yielded nothing \(0 of 3 items so "
                                         r"far\)$"):
        list(ds)


def test_repeat_and_with_length(shards):
    ds = wds.WebDataset(shards[0], shardshuffle=False).repeat(2)
    assert len(keys(ds)) == 20
    assert len(keys(wds.WebDataset(shards[0], shardshuffle=False).repeat(1, 3))) == 3
    with pytest.warns(UserWarning, match=r"only sets the value of __len__"):
        sized = wds.WebDataset(shards, shardshuffle=False).with_length(123)
    assert len(sized) == 123 and len(keys(sized)) == 40
    assert len(pickle.loads(pickle.dumps(sized))) == 123
    with pytest.raises(TypeError, match="has no len()"):
        len(wds.WebDataset(shards, shardshuffle=False))


def test_compose_shares_nothing_but_stages(shards):
    base = wds.WebDataset(shards, shardshuffle=False)
    a, b = base.to_tuple("cls"), base.to_tuple("txt")
    assert len(base.pipeline) + 1 == len(a.pipeline) == len(b.pipeline)
    assert next(iter(a)) == (b"0",) and next(iter(b)) == (b"text 0",)


def test_data_pipeline_splices_lists_and_rejects_non_stages():
    assert list(wds.DataPipeline([[1, 2, 3]])) == [1, 2, 3]
    with pytest.raises(ValueError, match="^1: not a valid pipeline stage$"):
        list(wds.DataPipeline([1, 2, 3]))


def test_pickling_a_whole_pipeline_gives_the_same_stream(shards):
    ds = (wds.WebDataset(shards, shardshuffle=10, seed=4).shuffle(7).decode("rgb8")
          .to_tuple("jpg", "cls", "__key__").batched(6))
    clone = pickle.loads(pickle.dumps(ds))
    for (a_img, a_cls, a_key), (b_img, b_cls, b_key) in zip(ds, clone):
        assert a_key == b_key and np.array_equal(a_img, b_img) and np.array_equal(a_cls, b_cls)
    it = iter(ds)
    next(it)
    assert pickle.loads(pickle.dumps(ds)).epoch == ds.epoch  # a running iteration is not state


def test_with_statement_closes_iterations(shards):
    from webdataset_cpp import _core

    before = _core._open_shard_descriptors()
    with wds.WebDataset(shards, shardshuffle=False) as ds:
        it = iter(ds)
        next(it)
        assert _core._open_shard_descriptors() == before + 1
    assert _core._open_shard_descriptors() == before
    with pytest.raises(ValueError, match="I/O operation on a closed WebDataset"):
        iter(ds)


def test_round_robin_stops_at_the_first_exhausted_source_unless_longest():
    sources = [[1, 2, 3, 4], [10], [20, 30]]
    # The reference's round_robin_shortest / round_robin_longest orders.
    assert list(wds.RoundRobin(sources)) == [1, 10, 20, 2]
    assert list(wds.RoundRobin(sources, longest=True)) == [1, 10, 20, 2, 30, 3, 4]
    assert list(wds.RoundRobin([[1, 2], [10, 20]])) == [1, 10, 2, 20]


def test_random_mix_is_seeded_and_follows_its_probabilities():
    def draws(seed, probs=(3, 1), n=4000):
        return list(wds.RandomMix([[0] * n, [1] * n], probs=list(probs), seed=seed))[:n]

    first = draws(5)
    assert first == draws(5) and first != draws(6)
    # 3:1 odds: 75% zeros (the binomial's standard deviation is 0.7% here).
    assert abs(first.count(0) / len(first) - 0.75) < 0.03
    assert draws(1, probs=(1, 0), n=50) == [0] * 50
    # Default: ends when a chosen source is exhausted; longest: drains every source.
    short = list(wds.RandomMix([[0] * 5, [1] * 50], seed=3))
    assert short.count(0) == 5 and short.count(1) < 50
    both = list(wds.RandomMix([[0] * 5, [1] * 50], longest=True, seed=3))
    assert sorted(both) == [0] * 5 + [1] * 50
    assert both[:len(short)] == short  # the same choices until the first source ran out
    with pytest.raises(ValueError, match="RandomMix: 2 datasets but 1 probs"):
        wds.RandomMix([[0], [1]], probs=[1])


def test_random_mix_resumes_exactly_from_its_state(shards):
    def mix(longest=True):
        first = wds.WebDataset(shards[:2], shardshuffle=False, seed=1).shuffle(5)
        second = wds.WebDataset(shards[2:], shardshuffle=10, seed=2)
        return wds.RandomMix([first, second], probs=[1, 2], longest=longest, seed=7)

    for longest in (True, False):
        reference = mix(longest)
        full = [s["__key__"] for s in reference]
        then = [s["__key__"] for s in reference]  # the next epoch
        assert len(full) == (40 if longest else len(full)) and len(set(full)) == len(full)
        for cut in sorted({0, 1, 13, len(full) - 1, len(full)}):
            interrupted = mix(longest)
            it = iter(interrupted)
            head = [next(it)["__key__"] for _ in range(cut)]
            state = pickle.loads(pickle.dumps(interrupted.state_dict()))
            resumed = mix(longest)
            resumed.load_state_dict(state)
            assert head + [s["__key__"] for s in resumed] == full, (longest, cut)
            # The iteration after the resumed one is the next epoch's.
            assert [s["__key__"] for s in resumed] == then
    assert not mix(False).state_dict()["started"]
    # A dataset's own refusal (here: other shards) comes from the iteration.
    interrupted = mix()
    next(iter(interrupted))
    swapped = wds.RandomMix([wds.WebDataset(shards[2:], shardshuffle=False, seed=1).shuffle(5),
                             wds.WebDataset(shards[:2], shardshuffle=10, seed=2)],
                            probs=[1, 2], longest=True, seed=7)
    swapped.load_state_dict(interrupted.state_dict())
    with pytest.raises(ValueError, match="the state was taken with another pipeline"):
        next(iter(swapped))


def test_random_mix_states_it_cannot_record_or_continue_are_named(shards):
    unseeded = wds.RandomMix([wds.WebDataset(shards[:1], shardshuffle=False)])
    state = unseeded.state_dict()
    assert state["resumable"] is False
    with pytest.raises(ValueError, match=re.escape(
            "this state records no position to resume from: RandomMix without seed= draws from "
            "Python's global random, which no state can replay")):
        unseeded.load_state_dict(state)
    lists = wds.RandomMix([[1, 2], [3]], seed=1)
    next(iter(lists))
    assert lists.state_dict()["reason"] == "RandomMix: dataset 0 (list) has no state_dict()"
    seeded = wds.RandomMix([wds.WebDataset(shards[:1], shardshuffle=False)], seed=1)
    next(iter(seeded))
    other = wds.RandomMix([wds.WebDataset(shards[:1], shardshuffle=False)], seed=2)
    with pytest.raises(ValueError, match="the state was taken with another RandomMix"):
        other.load_state_dict(seeded.state_dict())
    with pytest.raises(ValueError, match="not a RandomMix state"):
        other.load_state_dict(seeded.datasets[0].state_dict())
    with pytest.raises(ValueError, match="RandomMix state version 9 is unknown"):
        other.load_state_dict(dict(seeded.state_dict(), version=9))


def test_mixing_and_helpers():
    assert list(wds.MockDataset({"a": 1}, 3)) == [{"a": 1}] * 3
    assert list(wds.extract_keys("*.jpg", "cls")(iter([{"x.jpg": 1, "cls": 2}]))) == [(1, 2)]
    assert list(wds.rename_keys(img="*.jpg")(iter([{"x.jpg": 1, "cls": 2}]))) == [{"img": 1}]
    assert list(wds.non_empty(iter([1]))) == [1]
    with pytest.raises(ValueError, match="received no data at all"):
        list(wds.non_empty(iter([])))
    assert list(wds.repeatedly([1, 2], nbatches=3)) == [1, 2, 1]
    assert wds.getfirst({"b": 2}, "a;b") == 2
    assert wds.transform_with([1, 2], [None, str]) == [1, "2"]
    with wds.gopen("pipe:printf abc") as stream:
        assert stream.read() == b"abc"
    with pytest.raises(OSError, match="^exit 3: exit 3$|exit 3"):
        with wds.gopen("pipe:exit 3") as stream:
            stream.read()
    with pytest.raises(ValueError, match="^hdfs://b/x: no gopen handler defined$"):
        wds.gopen("hdfs://b/x")
