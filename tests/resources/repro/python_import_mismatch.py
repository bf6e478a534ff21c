"""Run: python tests/resources/repro/python_import_mismatch.py

Training code written for an older transformers run against the installed one: a name the release no longer
exports ("cannot import name 'AdamW'": 4.49.0 exports it, 4.52.4 does not) and a module it no longer has ("No module
named 'transformers.deepspeed'": in 4.45.2, gone from 4.46.0, moved to transformers.integrations). Prints both.
"""

from __future__ import annotations

import traceback


def main() -> None:
    try:
        from transformers import AdamW  # noqa: F401
    except ImportError:
        traceback.print_exc()
    try:
        import transformers.deepspeed  # noqa: F401
    except ImportError:
        traceback.print_exc()


if __name__ == "__main__":
    main()
