"""The filters, shard lists and mixers behave as the reference's (webdataset
1.0.2): its names, signatures and observed orders. The expected orders were
observed with the reference; they are written out here, not computed."""

import inspect
import os
import random

import pytest

import webdataset_cpp as wds
from webdataset_cpp import filters, mix, shardlists


def samples(n, url="mem.tar"):
    return [{"__key__": f"k{i}", "__url__": url, "cls": i} for i in range(n)]


def keys(items):
    return [s["__key__"] for s in items]


# ------------------------------------------------------------ shuffle(rng=)

# The reference's _shuffle(iter(range(40)), 10, 3, random.Random(5)).
REFERENCE_40 = [2, 3, 7, 9, 0, 12, 4, 11, 5, 1, 8, 13, 15, 10, 14, 18, 25, 21, 16, 26, 22, 6,
                17, 29, 31, 24, 33, 36, 37, 20, 35, 39, 27, 32, 38, 34, 30, 19, 23, 28]
# The reference's shuffle(8, initial=2, rng=random.Random(11)) over samples(30).
REFERENCE_30 = ["k1", "k3", "k5", "k6", "k8", "k11", "k7", "k4", "k15", "k14", "k2", "k18", "k9",
                "k16", "k17", "k0", "k12", "k24", "k20", "k22", "k21", "k26", "k28", "k27", "k23",
                "k19", "k29", "k10", "k25", "k13"]


def test_private_shuffle_is_the_reference_generator_function():
    assert list(inspect.signature(filters._shuffle).parameters) == [
        "data", "bufsize", "initial", "rng", "seed", "handler"]
    assert inspect.isgeneratorfunction(filters._shuffle)
    assert list(filters._shuffle(iter(range(40)), 10, 3, random.Random(5))) == REFERENCE_40
    assert list(filters._shuffle(iter(range(40)), 10, 3, seed=5)) == REFERENCE_40
    with pytest.raises(ValueError, match=r"^shuffle: pass rng= or seed=, not both$"):
        list(filters._shuffle(iter(range(3)), rng=random.Random(1), seed=1))
    with pytest.raises(TypeError, match=r"^shuffle: rng must be a random.Random \(with "
                                        r"randint\), got 7$"):
        wds.shuffle(10, rng=7)


def test_shuffle_with_a_python_rng_gives_the_reference_order():
    assert keys(wds.shuffle(8, initial=2, rng=random.Random(11))(iter(samples(30)))) == \
        REFERENCE_30
    pipeline = wds.DataPipeline([samples(30)], wds.shuffle(8, initial=2, rng=random.Random(11)))
    assert keys(pipeline) == REFERENCE_30
    # The rng goes on drawing: the next iteration is another order, as in the reference.
    assert sorted(keys(pipeline)) == sorted(REFERENCE_30) and keys(pipeline) != REFERENCE_30


class OpenClipDetShuffle(wds.PipelineStage):
    """OpenCLIP's detshuffle2 (src/open_clip_train/data.py), as it calls _shuffle."""

    def __init__(self, bufsize, initial, seed, epoch=-1):
        self.bufsize, self.initial, self.seed, self.epoch = bufsize, initial, seed, epoch

    def run(self, src):
        self.epoch += 1
        rng = random.Random()
        rng.seed(self.seed + self.epoch)
        return filters._shuffle(src, self.bufsize, self.initial, rng)


def test_an_openclip_style_stage_shuffles_shards_as_with_the_reference():
    urls = [f"u{i}.tar" for i in range(10)]
    pipeline = wds.DataPipeline(wds.SimpleShardList(urls), OpenClipDetShuffle(5, 2, 7))
    assert [d["url"] for d in pipeline] == ["u1.tar", "u0.tar", "u5.tar", "u3.tar", "u7.tar",
                                            "u9.tar", "u8.tar", "u2.tar", "u6.tar", "u4.tar"]
    assert [d["url"] for d in pipeline] == ["u0.tar", "u2.tar", "u5.tar", "u3.tar", "u7.tar",
                                            "u1.tar", "u9.tar", "u6.tar", "u4.tar", "u8.tar"]


# ------------------------------------------------------------ unseeded shuffle


def test_an_unseeded_shuffle_gives_a_new_order_every_run(monkeypatch):
    monkeypatch.delenv("WDS_SEED", raising=False)
    runs = [keys(wds.DataPipeline([samples(60)], wds.shuffle(30, initial=10))) for _ in range(3)]
    assert all(sorted(r) == sorted(keys(samples(60))) for r in runs)
    assert runs[0] != runs[1] and runs[1] != runs[2] and runs[0] != runs[2]
    pipeline = wds.DataPipeline([samples(60)], wds.shuffle(30, initial=10))
    assert keys(pipeline) != keys(pipeline)  # and every iteration of one pipeline
    called = [keys(wds.shuffle(30)(iter(samples(60)))) for _ in range(2)]
    assert called[0] != called[1]


def test_a_seed_keeps_a_shuffle_repeatable(monkeypatch):
    monkeypatch.delenv("WDS_SEED", raising=False)

    def order(shuffle, seed=None):
        pipeline = wds.DataPipeline([samples(60)], shuffle)
        if seed is not None:
            pipeline.seed = seed
        return keys(pipeline)

    assert order(wds.shuffle(30, seed=4)) == order(wds.shuffle(30, seed=4))
    assert keys(wds.shuffle(30, seed=4)(iter(samples(60)))) == order(wds.shuffle(30, seed=4))
    # A pipeline's seed (0 included) seeds its unseeded shuffles.
    assert order(wds.shuffle(30), seed=0) == order(wds.shuffle(30), seed=0)
    assert order(wds.shuffle(30), seed=0) != order(wds.shuffle(30), seed=1)
    monkeypatch.setenv("WDS_SEED", "3")
    assert order(wds.shuffle(30)) == order(wds.shuffle(30))


def state_after_one(dataset):
    it = iter(dataset)
    next(it)
    return dataset.state_dict()


def test_a_state_of_an_unseeded_shuffle_says_why_it_cannot_resume(shards, monkeypatch):
    monkeypatch.delenv("WDS_SEED", raising=False)
    state = state_after_one(wds.WebDataset(shards, shardshuffle=100).shuffle(5))
    assert state["resumable"] is False
    assert state["reason"] == (
        "shuffle() without a seed draws a new order every run, which a state cannot replay "
        "(pass seed= to shuffle, or give the pipeline a seed: WebDataset(seed=...), "
        "DataPipeline.seed or $WDS_SEED)")
    with pytest.raises(ValueError, match=r"^load_state_dict: this state records no position "
                                         r"to resume from: shuffle\(\) without a seed"):
        wds.WebDataset(shards, shardshuffle=100).shuffle(5).load_state_dict(state)
    python = state_after_one(wds.WebDataset(shards, shardshuffle=100, seed=1)
                             .shuffle(5, rng=random.Random(1)))
    assert python["resumable"] is False and python["reason"] == (
        "shuffle(rng=...) holds items between its outputs, which a state cannot record")
    seeded = state_after_one(wds.WebDataset(shards, shardshuffle=100, seed=1).shuffle(5))
    assert seeded.get("resumable", True) and seeded["checkpoint"] is not None
    own = state_after_one(wds.WebDataset(shards, shardshuffle=100).shuffle(5, seed=2))
    assert own.get("resumable", True)


# ------------------------------------------------------------ epochs of shuffle stages


def test_shuffle_stages_have_epoch_and_set_epoch():
    def order(stage):
        return keys(wds.DataPipeline([samples(40)], stage))

    stage = wds.detshuffle(20, initial=5, seed=3)
    assert stage.epoch == -1 and wds.detshuffle(epoch=2).epoch == 2
    assert wds.shuffle(10).epoch == -1
    follows_pipeline = order(stage)
    stage.set_epoch(4)
    assert stage.epoch == 4
    fourth = order(stage)
    assert fourth != follows_pipeline and order(stage) == fourth
    stage.epoch = 5
    assert order(stage) not in (fourth, follows_pipeline)
    stage.set_epoch(4)
    assert order(stage) == fourth
    plain = wds.shuffle(20, initial=5, seed=3)
    plain.set_epoch(4)
    assert order(plain) == fourth
    assert isinstance(stage, wds.detshuffle) and isinstance(stage, filters.Shuffle)


# ------------------------------------------------------------ fields


def test_extract_keys_takes_glob_patterns():
    items = [{"__key__": "a", "png": 1, "cls": 2}, {"__key__": "b", "x.jpg": 3, "cls": 4}]
    assert list(wds.extract_keys("*.png;*.jpg", "cls")(iter(items))) == [(1, 2), (3, 4)]
    assert list(wds.extract_keys(["*.png", "*.jpg"])(iter(items))) == [(1,), (3,)]
    # ignore_missing leaves the pattern out, as the reference
    assert list(wds.extract_keys("*.png", "*.txt", ignore_missing=True)(
        iter([{"png": 1, "cls": 2}]))) == [(1,)]
    with pytest.raises(wds.DataError, match=r"^mem.tar: key k0: extract_keys: no field matches "
                                            r"'\*.txt' \(fields present: __key__, __url__, cls\)$"):
        list(wds.extract_keys("*.txt")(iter(samples(1))))
    with pytest.raises(wds.DataError, match=r"^sample: extract_keys: fields \['a.png', 'b.png'\] "
                                            r"all match '\*.png'$"):
        list(wds.extract_keys("*.png")(iter([{"a.png": 1, "b.png": 2}])))
    assert list(wds.extract_keys("*.png", duplicate_is_error=False)(
        iter([{"a.png": 1, "b.png": 2}]))) == [(1,)]


def test_rename_without_keep_drops_key_and_url_native_and_python():
    sample = {"__key__": "a", "__url__": "u", "cls": 1, "txt": 2}

    def python_handler(exn):
        raise exn

    native = wds.rename(keep=False, label="cls")
    python = wds.rename(keep=False, label="cls", handler=python_handler)
    assert native.is_native(None) and not python.is_native(None)
    for stage in (native, python):
        assert list(stage(iter([dict(sample)]))) == [{"label": 1}]
        # A listed metadata field is removed as any other (keep=True).
        kept = wds.rename(key="__key__", label="cls", handler=stage.handler)
        assert list(kept(iter([dict(sample)]))) == [{"__url__": "u", "txt": 2, "key": "a",
                                                     "label": 1}]


def test_rename_without_keep_in_a_native_chain_from_shards(shards):
    out = list(wds.WebDataset(shards, shardshuffle=False).rename(keep=False, label="cls"))
    assert len(out) == 40 and all(list(s) == ["label"] for s in out)


def test_rename_keys_as_the_reference():
    sample = {"d/A.JPG": 1, "b.png": 2, "c.cls": 3}
    renamed = wds.rename_keys(("img", "*.jpg"), ("img", "*.png"), duplicate_is_error=False,
                              keep_unselected=True)
    assert list(renamed(iter([sample]))) == [{"img": 1, "c.cls": 3}]
    with pytest.raises(wds.DataError, match=r"rename_keys: two fields become 'img'"):
        list(wds.rename_keys(("img", "*.jpg"), ("img", "*.png"))(iter([sample])))
    # The last pattern given that matches wins; the other one is unmatched.
    with pytest.raises(wds.DataError, match=r"rename_keys: no field matches \['\*.jpg'\]"):
        list(wds.rename_keys(img="*.jpg", alt="a*")(iter([{"a.jpg": 1}])))


def test_xdecode_matches_the_name_after_the_last_slash_lower_cased():
    out = list(wds.xdecode(must_decode=False)(
        iter([{"__key__": b"k", "D/X.TXT": b"hi", "y.bin": b"b", "z.foo": b"f"}])))
    assert out == [{"__key__": b"k", "D/X.TXT": "hi", "y.bin": b"b", "z.foo": b"f"}]
    with pytest.raises(ValueError, match=r"^sample: xdecode: no decoder for 'z.foo'$"):
        list(wds.xdecode()(iter([{"z.foo": b"f"}])))
    assert filters.find_decoder(filters.default_decoders, "a/B.PYD") is filters.decode_pickle
    assert filters.find_decoder([("*.x", False)], "a.x") is False
    assert filters.find_decoder(filters.default_decoders, "a.foo") is None


def test_filters_helpers_of_the_reference():
    assert filters.compose(lambda x: x + 1, lambda x: x * 2)(3) == 8
    assert list(filters.pipeline(iter([1, 2]), filters.map(lambda x: x * 10))) == [10, 20]
    assert list(filters.pipeline(iter([1, 2, 3]), filters.select(lambda x: x > 1),
                                 filters.map(lambda x: x * 10))) == [20, 30]
    assert filters.parse_field_spec("jpg;png cls") == [["jpg", "png"], ["cls"]]
    assert filters.tuple2dict((5, 6)) == {0: 5, 1: 6}
    assert filters.dict2tuple({0: 5, 1: 6}) == (5, 6)
    assert filters.transform_with([1], None) == [1]
    with pytest.raises(ValueError, match=r"^transform_with: 2 transformers for a sample of 1$"):
        filters.transform_with([1], [str, str])
    assert list(filters.combine_values([1, 2])) == [1, 2]
    assert filters.combine_values(["a", "b"]) == ["a", "b"]
    buf = [10, 20, 30]
    assert filters.pick(buf, random.Random(0)) in (10, 20, 30) and len(buf) == 2
    assert filters.identity(4) == 4
    assert list(filters._decode(iter([{"__key__": "a", "cls": b"3"}]))) == [
        {"__key__": "a", "cls": 3}]
    cached = filters.Cached()
    assert list(cached.run(iter([1, 2]))) == [1, 2] and list(cached.run(iter([]))) == [1, 2]
    assert filters.LMDBCached is wds.cache.LMDBCached  # the reference defines it in filters
    curried = filters.pipelinefilter(filters._select)
    assert isinstance(curried, filters.RestCurried)
    assert isinstance(curried(lambda x: x > 1), filters.FilterFunction)
    assert list(curried(lambda x: x > 1)(iter([1, 2, 3]))) == [2, 3]


# ------------------------------------------------------------ shard lists

URLS = [f"u{i}.tar" for i in range(10)]
# The reference's SimpleShardList(URLS) with .seed = 3 set afterwards.
SEED_3 = ["u1.tar", "u5.tar", "u6.tar", "u0.tar", "u9.tar", "u4.tar", "u7.tar", "u2.tar",
          "u8.tar", "u3.tar"]


def test_a_shard_list_seed_set_after_construction_shuffles_it():
    shard_list = wds.SimpleShardList(URLS)
    assert [d["url"] for d in shard_list] == URLS
    shard_list.seed = 3
    assert [d["url"] for d in shard_list] == SEED_3
    assert [d["url"] for d in wds.SimpleShardList(URLS, seed=3)] == SEED_3
    assert shard_list.urls == URLS


def test_a_shard_list_seed_set_on_a_dataset_orders_the_native_source(shards):
    dataset = wds.DataPipeline(wds.SimpleShardList(shards), wds.split_by_worker,
                               wds.tarfile_to_samples())
    assert list(dict.fromkeys(s["__url__"] for s in dataset)) == shards
    dataset.stage(0).seed = 1
    expected = list(shards)
    random.Random(1).shuffle(expected)
    assert expected != shards
    assert list(dict.fromkeys(s["__url__"] for s in dataset)) == expected


def test_resampled_shards_without_a_seed_draw_anew_each_iteration_and_instance():
    python = wds.ResampledShards(URLS, nshards=30, worker_seed=lambda: 7)
    first, second = [d["url"] for d in python], [d["url"] for d in python]
    other = [d["url"] for d in wds.ResampledShards(URLS, nshards=30, worker_seed=lambda: 7)]
    assert first != second and first != other and second != other
    seeded = [[d["url"] for d in wds.ResampledShards(URLS, nshards=30, seed=s,
                                                     worker_seed=lambda: 7)] for s in (0, 0, 1)]
    assert seeded[0] == seeded[1] != seeded[2]
    det = [[d["url"] for d in wds.ResampledShards(URLS, nshards=30, deterministic=True,
                                                  worker_seed=lambda: 7)] for _ in range(2)]
    assert det[0] == det[1]


def test_native_resampled_shards_without_a_seed_draw_anew(shards, monkeypatch):
    monkeypatch.delenv("WDS_SEED", raising=False)

    def urls(**kw):
        dataset = wds.DataPipeline(wds.ResampledShards(shards, nshards=12, **kw),
                                   wds.tarfile_to_samples())
        return [s["__url__"] for s in dataset][::10]

    draws = [urls() for _ in range(3)]
    assert all(len(d) == 12 for d in draws)
    assert draws[0] != draws[1] or draws[1] != draws[2]
    assert urls(seed=5) == urls(seed=5) and urls(deterministic=True) == urls(deterministic=True)
    unseeded = wds.WebDataset(shards, resampled=True, shardshuffle=False).with_epoch(200)
    assert keys(unseeded) != keys(unseeded)
    seeded = wds.WebDataset(shards, resampled=True, shardshuffle=False, seed=5).with_epoch(200)
    assert keys(seeded) == keys(wds.WebDataset(shards, resampled=True, shardshuffle=False,
                                               seed=5).with_epoch(200))


def test_resampled_is_a_stage_as_in_the_reference():
    stage = wds.resampled(5)
    drawn = [d["url"] for d in wds.DataPipeline(wds.SimpleShardList(URLS[:3]), stage)]
    assert len(drawn) == 5 and set(drawn) <= set(URLS[:3])
    assert len(list(wds.DataPipeline(wds.SimpleShardList(URLS), wds.resampled(n=4)))) == 4
    assert [d["url"] for d in wds.resampled(iter([{"url": "a"}]), n=3)] == ["a"] * 3
    assert inspect.signature(shardlists.resampled_).parameters["n"].default == \
        inspect.signature(shardlists.resampled).parameters["n"].default


def test_directory_shard_list_takes_each_shard_once_per_round(tmp_path):
    for name in ("a.tar", "b.tgz", "c.txt"):
        (tmp_path / name).write_bytes(b"")
    directory = str(tmp_path) + "/"
    listed = shardlists.DirectoryShardList(directory, poll=None, mode="keep", select="oldest")
    urls = [d["url"] for d in listed]
    pid = os.getpid()
    assert sorted(urls) == [f"{directory}a.tar._{pid}_", f"{directory}b.tgz._{pid}_"]
    assert sorted(os.listdir(tmp_path)) == ["a.tar._done_", "b.tgz._done_", "c.txt"]
    with pytest.raises(ValueError, match=r"^DirectoryShardList: 'x' must be a directory ending "
                                         r"in '/'$"):
        shardlists.DirectoryShardList("x")
    assert shardlists.get_pid_from_filename("a.tar._12_") == 12
    assert shardlists.without_last_extension("a.b.tar") == "a.b"
    assert shardlists.check_pid_is_running(pid)


def test_multi_shard_sample_and_shardspec(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOW_OBSOLETE", "1")  # else ObsoleteException, as the reference
    spec = {"prefix": "p/", "datasets": [{"name": "a", "shards": "a-{0..3}.tar", "choose": 2},
                                         {"shards": ["b-{0..1}.tar"], "resample": 3}]}
    sample = shardlists.MultiShardSample(spec)
    assert [(s.name, s.perepoch, s.resample) for s in sample.sources] == [("a", 2, -1),
                                                                          ("@", -1, 3)]
    sample.set_epoch(4)
    # The reference's draws for this spec after set_epoch(4).
    assert [d["url"] for d in sample] == ["p/b-0.tar", "p/a-0.tar", "p/b-1.tar", "p/b-0.tar",
                                          "p/a-2.tar"]
    with pytest.raises(ValueError, match=r"unknown dataset keys \['bad'\]"):
        shardlists.MultiShardSample({"datasets": [{"shards": "a.tar", "bad": 1}]})
    path = tmp_path / "spec.yaml"
    path.write_text("datasets:\n  - shards: x-{0..1}.tar\n")
    assert isinstance(shardlists.shardspec(str(path)), shardlists.MultiShardSample)
    assert isinstance(shardlists.shardspec("x-{0..1}.tar"), wds.SimpleShardList)


def test_shardlists_helpers_of_the_reference(monkeypatch):
    monkeypatch.setenv("WDS_BUCKET", "b1")
    assert shardlists.envsubst("s3://${BUCKET}/x") == "s3://b1/x"
    with pytest.raises(ValueError, match=r"^the environment variable WDS_NOPE is not set$"):
        shardlists.envsubst("${NOPE}")
    assert shardlists.expand_source("a-{0..1}.tar") == ["a-0.tar", "a-1.tar"]
    assert shardlists.expand_source(iter(["x", "y", "z"]), max_urls=2) == ["x", "y"]
    with pytest.raises(ValueError, match=r"^cannot handle <class 'int'>$"):
        shardlists.expand_source(3)
    assert shardlists.ResampledShardList is shardlists.ResampledShards
    assert isinstance(shardlists.default_rng, random.Random)


# ------------------------------------------------------------ mixing


def test_mix_generator_functions_of_the_reference():
    assert list(mix.round_robin_shortest(iter([1, 2, 3]), iter([10]))) == [1, 10, 2]
    assert list(mix.round_robin_longest(iter([1, 2, 3]), iter([10]), iter([20, 30]))) == [
        1, 10, 20, 2, 30, 3]
    drawn = list(mix.random_samples([iter([0] * 5), iter([1] * 5)], probs=[1, 0]))
    assert drawn == [0] * 5
    both = list(mix.random_samples([iter([0] * 5), iter([1] * 5)], longest=True))
    assert sorted(both) == [0] * 5 + [1] * 5
    assert list(mix.round_robin_shortest()) == []


# ------------------------------------------------------------ the audit


REFERENCE_NAMES = {
    filters: "Cached FilterFunction RestCurried associate batched combine_values compose "
             "compose2 decode decode_bin decode_pickle decode_text default_collation_fn "
             "default_decoders detshuffle dict2tuple extract_keys find_decoder getfirst identity "
             "info log_keys map map_dict map_tuple parse_field_spec pick pipeline pipelinefilter "
             "rename rename_keys reraise_exception rsample select shuffle slice to_tuple "
             "transform_with tuple2dict unbatched unlisted xdecode _associate _batched _decode "
             "_extract_keys _info _log_keys _map _map_dict _map_tuple _rename _rename_keys "
             "_rsample _select _shuffle _to_tuple _unbatched _unlisted _xdecode",
    shardlists: "DirectoryShardList MSSource MultiShardSample ResampledShardList ResampledShards "
                "SimpleShardList check_pid_is_running default_rng envlookup envsubst expand "
                "expand_source expand_urls get_pid_from_filename non_empty resampled resampled_ "
                "shardspec single_node_only split_by_node split_by_worker without_last_extension",
    mix: "RandomMix RoundRobin random_samples round_robin_longest round_robin_shortest",
}


@pytest.mark.parametrize("module", list(REFERENCE_NAMES), ids=lambda m: m.__name__)
def test_every_public_name_of_the_reference_module_exists(module):
    missing = [n for n in REFERENCE_NAMES[module].split() if not hasattr(module, n)]
    assert missing == []


def test_the_shard_source_is_fused_by_what_its_stages_say_they_are(shards):
    from webdataset_cpp import _plan

    class MyList(wds.SimpleShardList):
        pass

    ctx = _plan.Context()
    for first in (MyList(shards), wds.SimpleShardList(shards), wds.ResampledShards(shards)):
        pipeline = [first, shardlists.epoch_shuffle(), wds.split_by_worker,
                    wds.tarfile_to_samples()]
        assert _plan.single_native_segment(pipeline, ctx) is not None, first
    # A class is no stage: the uncalled class is not taken for the stage it makes.
    assert _plan.kind_of(wds.SimpleShardList) is None
    assert _plan.kind_of(wds.SimpleShardList(shards)) == _plan.SHARD_LIST
    unfused = [wds.SimpleShardList(shards), shardlists.epoch_shuffle, wds.tarfile_to_samples()]
    assert _plan.single_native_segment(unfused, ctx) is None


def test_a_shard_list_subclass_that_redefines_iteration_is_run_as_written(shards):
    # The reference iterates the subclass; fusing it into the native source as
    # its base class would read other shards, silently (15 samples for 5).
    class FirstShardOnly(wds.SimpleShardList):
        def __iter__(self):
            yield {"url": self.urls[0]}

    class TwoDraws(wds.ResampledShards):
        def __iter__(self):
            yield {"url": self.urls[0]}
            yield {"url": self.urls[1]}

    def count(first):
        return len(list(wds.DataPipeline(first, wds.tarfile_to_samples())))

    per_shard = count(wds.SimpleShardList(shards[:1]))
    assert count(FirstShardOnly(shards)) == per_shard
    assert count(TwoDraws(shards)) == count(wds.SimpleShardList(shards[:2]))
    from webdataset_cpp import _plan
    assert _plan.kind_of(FirstShardOnly(shards)) is None and _plan.kind_of(TwoDraws(shards)) is None
