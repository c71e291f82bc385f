"""Every module of the package imports on its own, first, in a fresh process,
and no module imports another at load time that imports it back (a cycle
whose outcome would depend on which module a program imports first)."""

import ast
import os
import pkgutil
import subprocess
import sys

import pytest

import webdataset_cpp

PACKAGE_DIR = os.path.dirname(webdataset_cpp.__file__)
MODULES = sorted(m.name for m in pkgutil.iter_modules([PACKAGE_DIR]) if m.name != "_core")

# Loads webdataset_cpp.<name> without running the package's __init__ first
# (which imports every module in its own order): only what <name> imports
# runs before it.
ALONE = """
import importlib, importlib.util, sys, types
spec = importlib.util.find_spec("webdataset_cpp")
package = types.ModuleType("webdataset_cpp")
package.__path__ = list(spec.submodule_search_locations)
sys.modules["webdataset_cpp"] = package
importlib.import_module("webdataset_cpp." + sys.argv[1])
"""


@pytest.mark.parametrize("name", MODULES)
def test_each_module_imports_on_its_own_first(name):
    result = subprocess.run([sys.executable, "-c", ALONE, name], capture_output=True, text=True,
                            env=dict(os.environ), timeout=120)
    assert result.returncode == 0, result.stderr


def test_the_package_imports_in_a_fresh_process():
    result = subprocess.run([sys.executable, "-c", "import webdataset_cpp"], capture_output=True,
                            text=True, env=dict(os.environ), timeout=120)
    assert result.returncode == 0, result.stderr


def load_time_imports(name):
    """The package modules `name` imports at load time (statements outside
    functions and classes, including those under if/try)."""
    path = os.path.join(PACKAGE_DIR, name + ".py")
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        tree = ast.parse(f.read())
    found, pending = set(), list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.If, ast.Try)):
            pending += node.body + node.orelse + getattr(node, "finalbody", [])
            pending += [n for h in getattr(node, "handlers", []) for n in h.body]
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found & set(MODULES)


def test_no_module_imports_itself_through_others_at_load_time():
    graph = {name: load_time_imports(name) for name in MODULES}
    state = {}

    def cycle_from(name, path):
        state[name] = "open"
        for dep in sorted(graph[name]):
            if state.get(dep) == "open":
                return path + [dep]
            if dep not in state:
                found = cycle_from(dep, path + [dep])
                if found:
                    return found
        state[name] = "done"
        return None

    for name in MODULES:
        if name not in state:
            cycle = cycle_from(name, [name])
            assert cycle is None, " -> ".join(cycle)
