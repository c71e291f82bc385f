"""install_as_webdataset(): this package under the reference's import names.

>>> import webdataset_cpp
>>> callable(webdataset_cpp.install_as_webdataset)
True
"""

import importlib
import pkgutil
import sys

_PACKAGE = __name__.rpartition(".")[0]


def _not_ours(name, package):
    module = sys.modules.get(name)
    return module is not None and not (module is package or
                                       module.__name__.startswith(_PACKAGE + "."))


def install_as_webdataset():
    """Registers webdataset_cpp in ``sys.modules`` as ``webdataset``, and each of
    its modules as ``webdataset.<module>`` (``webdataset.filters``,
    ``webdataset.tariterators``, ...), so that code which says ``import
    webdataset`` (a library you cannot edit) runs on this package. Call it
    before that code is imported, as with ``pymysql.install_as_MySQLdb()``::

        import webdataset_cpp
        webdataset_cpp.install_as_webdataset()
        import open_clip_train.data        # its "import webdataset as wds" gets ours

    A spawned DataLoader worker starts without it: make the call at module
    level in the main script (which each spawned worker imports again), not
    under ``if __name__ == "__main__"``; forked workers inherit it.

    A module the reference has and this package lacks
    (``webdataset.typecheck``) stays missing: importing it raises
    ModuleNotFoundError. Calling it again does nothing. If a real
    ``webdataset`` (or one of its modules) was already imported, raises
    ImportError and changes nothing: two packages under one name would mix
    their classes and exceptions.
    """
    package = sys.modules[_PACKAGE]
    names = [info.name for info in pkgutil.iter_modules(package.__path__)]
    imported = ["webdataset"] + [n for n in sys.modules if n.startswith("webdataset.")]
    taken = [n for n in imported if _not_ours(n, package)]
    if taken:
        where = getattr(sys.modules.get(taken[0]), "__file__", None)
        raise ImportError(f"install_as_webdataset: {taken[0]} is already imported (from {where}); "
                          "call install_as_webdataset() before anything imports webdataset")
    modules = {name: importlib.import_module(f"{_PACKAGE}.{name}") for name in names}
    sys.modules["webdataset"] = package
    for name, module in modules.items():
        sys.modules[f"webdataset.{name}"] = module
