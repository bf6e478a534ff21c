"""ds-doctor: runtime diagnostics for distributed PyTorch training stacks."""

import importlib.util as _util
import os as _os
import sys as _sys

__version__ = "0.1.0"

#: ds-doctor's other top-level packages, installed beside this one
OWN_PACKAGES = ("probes", "reports")


def clashing_packages() -> list[str]:
    """ds-doctor's top-level packages that the import path resolves to someone else's (a training repository's own
    `probes/` or `reports/`, first on the path of a user's job): one line each. Found without importing them."""
    home = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    found = []
    for name in OWN_PACKAGES:
        module = _sys.modules.get(name)
        origin = getattr(module, "__file__", None) if module is not None else None
        if module is None:
            try:
                spec = _util.find_spec(name)
            except (ImportError, ValueError):
                continue
            origin = spec.origin if spec is not None else None
        if origin and _os.path.dirname(_os.path.dirname(_os.path.abspath(origin))) != home:
            found.append(f"the package {name!r} on the import path is {_os.path.dirname(origin)}, not ds-doctor's "
                         f"(in {home}): rename that folder or take it off the path (it comes first from the "
                         "working directory)")
    return found


if _clash := clashing_packages():
    raise ImportError("ds-doctor: " + "; ".join(_clash))
