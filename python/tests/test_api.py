"""The public API: every name of the reference package is exported or listed
as missing in docs/PYTHON.md's migration table, the type stubs match the
compiled module, and the docstrings' examples run."""

import ast
import doctest
import importlib
import os
import re

import pytest

import webdataset_cpp as wds
from webdataset_cpp import _core

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

# dir(webdataset) of the reference package, 1.0.2 (names not starting with _).
REFERENCE_NAMES = """
Cached Continue DataPipeline Decoder DecodingError FluidInterface FluidWrapper LMDBCached
LRUCleanup MockDataset MultiShardSample PipelineStage RandomMix ResampledShards RoundRobin
ShardWriter SimpleShardList TarWriter WebDataset WebLoader associate autodecode batched cache
compat decode detshuffle extract_keys extradatasets filters getfirst gopen gopen_schemes gzfilter
handle_extension handlers ignore_and_continue ignore_and_stop imagehandler info map map_dict
map_tuple mix non_empty numpy_dumps pipe_cleaner pipeline pipelinefilter pytorch
pytorch_weights_only rename rename_keys repeatedly reraise_exception resampled rsample select
shardlists shardspec shuffle single_node_only slice split_by_node split_by_worker
tarfile_samples tarfile_to_samples tariterators tenbin to_tuple torch_audio torch_dumps
torch_loads torch_video transform_with unbatched utils warn_and_continue warn_and_stop
with_epoch with_length writer xdecode
""".split()

FLUENT = """batched unbatched listed unlisted log_keys shuffle map decode map_dict select to_tuple
map_tuple slice rename rsample rename_keys extract_keys xdecode mcached lmdb_cached with_epoch
with_length repeat compose append""".split()


def migration_table():
    """{name: status} from docs/PYTHON.md's migration table rows."""
    with open(os.path.join(ROOT, "docs", "PYTHON.md")) as f:
        text = f.read()
    rows = re.findall(r"^\| `([A-Za-z_.()]+)` \| (same|different|missing) \|", text, re.M)
    return dict(rows)


def test_every_reference_name_is_in_the_migration_table():
    table = migration_table()
    assert sorted(set(REFERENCE_NAMES) - set(table)) == []
    for name in REFERENCE_NAMES:
        if table[name] == "missing":
            assert not hasattr(wds, name), name
        else:
            assert hasattr(wds, name), name
    fluent = {n[1:] for n in table if n.startswith(".")}
    assert sorted(set(FLUENT) - fluent) == []
    for method in FLUENT:
        status = table["." + method]
        assert hasattr(wds.WebDataset, method) == (status != "missing"), method


def test_the_stubs_match_the_compiled_module():
    with open(os.path.join(os.path.dirname(wds.__file__), "_core.pyi")) as f:
        tree = ast.parse(f.read())
    stubbed = {node.name for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    compiled = {n for n in dir(_core) if not n.startswith("__")}
    assert stubbed == compiled
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            methods = {m.name for m in node.body if isinstance(m, ast.FunctionDef)}
            members = {n for n in dir(getattr(_core, node.name))
                       if not n.startswith("_") or n in ("__getstate__", "__setstate__")}
            assert methods - {"__init__", "__next__", "__contains__", "__len__", "__dlpack__",
                              "__dlpack_device__", "__array_interface__"} <= members, node.name


MODULES = ["webdataset_cpp", "webdataset_cpp._plan", "webdataset_cpp.autodecode",
           "webdataset_cpp.compat", "webdataset_cpp.distributed", "webdataset_cpp.errors",
           "webdataset_cpp.extradatasets", "webdataset_cpp.filters", "webdataset_cpp.gopen",
           "webdataset_cpp.handlers", "webdataset_cpp.loader", "webdataset_cpp.mix",
           "webdataset_cpp.multi",
           "webdataset_cpp.pipeline", "webdataset_cpp.remote", "webdataset_cpp.shardlists",
           "webdataset_cpp.tariterators", "webdataset_cpp.utils", "webdataset_cpp.wids",
           "webdataset_cpp.writer"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"wds": wds}, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0 or name in ("webdataset_cpp._plan",)
