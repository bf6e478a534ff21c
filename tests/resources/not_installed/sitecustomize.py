"""A node where some packages are not installed, as far as Python can tell (PYTHONPATH=this folder): the top-level
names in DS_TEST_NOT_INSTALLED (comma-separated) are not found by the path finder, so `find_spec` says None and an
import raises ModuleNotFoundError, in the doctor and in every rank it starts. torch itself stays real."""

import importlib.machinery
import os

_NOT_INSTALLED = {name for name in os.environ.get("DS_TEST_NOT_INSTALLED", "").split(",") if name}
_find = importlib.machinery.PathFinder.find_spec.__func__  # type: ignore[attr-defined]


def _find_spec(cls, name, path=None, target=None):  # type: ignore[no-untyped-def]
    if name.split(".")[0] in _NOT_INSTALLED:
        return None
    return _find(cls, name, path, target)


importlib.machinery.PathFinder.find_spec = classmethod(_find_spec)  # type: ignore[method-assign,assignment]
