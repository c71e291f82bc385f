"""`pip install --no-build-isolation .` as a user runs it: a copy of the
source tree built offline by pip (setup.py drives the CMake build of the
extension), installed with --target, imported from there, and running a
pipeline. ccache, when installed, makes the rebuild cheap: the copy's build
directory sits at the same depth as the project's, and CCACHE_BASEDIR makes
its paths relative, so objects the main build made are reused."""

import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Run by the installed package, in a fresh interpreter.
SCRIPT = r"""
import json, sys
import numpy as np
import webdataset_cpp as wds

with wds.ShardWriter("shard-%06d.tar", maxcount=4, verbose=0) as sink:
    for i in range(10):
        sink.write({"__key__": f"{i:04d}", "cls": i % 3, "npy": np.full((2, 3), i, np.int16)})
ds = (wds.WebDataset("shard-{000000..000002}.tar", shardshuffle=False)
      .decode().to_tuple("npy", "cls", "__key__").batched(4))
batches = [(a.shape, a.dtype.str, a[:, 0, 0].tolist(), c.tolist(), k) for a, c, k in ds]
print(json.dumps({"package": wds.__file__, "core": wds._core.__file__, "batches": batches}))
"""


def source_files():
    """The tree as a checkout has it: git's tracked and untracked-not-ignored
    files, or (no git) everything but build outputs."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=ROOT, check=True,
                                capture_output=True).stdout.decode().split("\0")
        return [f for f in listed if f and os.path.isfile(os.path.join(ROOT, f))]
    except (OSError, subprocess.CalledProcessError):
        out = []
        for directory, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d != ".git" and not d.startswith("build")
                       and d != "__pycache__"]
            out += [os.path.relpath(os.path.join(directory, f), ROOT) for f in files]
        return out


def test_pip_install_target_builds_offline_and_runs(tmp_path):
    copy = tmp_path / "src"
    for name in source_files():
        os.makedirs(copy / os.path.dirname(name), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, name), copy / name)
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(CCACHE_BASEDIR=str(tmp_path), WDS_CMAKE_BUILD_DIR=str(copy / "build"))
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
         "--no-index", "--target", str(target), str(copy)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1500)
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(f"pip install took {seconds:.1f} s")
    work = tmp_path / "run"
    work.mkdir()
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=dict(env, PYTHONPATH=str(target)),
                         cwd=work, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["package"] == str(target / "webdataset_cpp" / "__init__.py")
    assert os.path.dirname(out["core"]) == str(target / "webdataset_cpp")
    assert out["batches"] == [
        [[4, 2, 3], "<i2", [0, 1, 2, 3], [0, 1, 2, 0], ["0000", "0001", "0002", "0003"]],
        [[4, 2, 3], "<i2", [4, 5, 6, 7], [1, 2, 0, 1], ["0004", "0005", "0006", "0007"]],
        [[2, 2, 3], "<i2", [8, 9], [2, 0], ["0008", "0009"]],
    ]
    for stub in ("_core.pyi", "py.typed", "_shared.py"):
        assert (target / "webdataset_cpp" / stub).is_file()
