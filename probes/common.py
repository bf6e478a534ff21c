"""Helpers several probe families share."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def accelerate_session() -> Iterator[None]:
    """One case's use of Accelerate: its process-wide singletons and the ACCELERATE_* variables its
    plugins export are reset afterwards, so the next case in the launch starts clean."""
    saved_env = dict(os.environ)
    try:
        yield
    finally:
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        os.environ.clear()
        os.environ.update(saved_env)
