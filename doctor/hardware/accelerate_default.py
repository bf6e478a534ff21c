"""Accelerate's default config (`ds-doctor env`'s `accelerate_config` section): the file `accelerate config` writes
and `accelerate launch` reads when no `--config_file` is given, as `accelerate env` shows it.

Its place is Accelerate's own rule (accelerate/commands/config/config_args.py), worked out without importing
Accelerate (which imports torch): `$HF_HOME/accelerate/default_config.yaml`, HF_HOME defaulting to
`$XDG_CACHE_HOME/huggingface` and that to `~/.cache/huggingface`. It is read with the bounds of
`--accelerate-config` (ds_doctor.userinput); the CLI scrubs it with the rest of the output (ds_doctor.redact).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NAMES = ("default_config.yaml", "default_config.json")  # the JSON one: what older Accelerate releases wrote


def default_config_path(environ: Mapping[str, str]) -> Path:
    """Where Accelerate looks for its default config (the YAML one where neither exists)."""
    cache = environ.get("XDG_CACHE_HOME") or "~/.cache"
    folder = Path(environ.get("HF_HOME") or os.path.join(cache, "huggingface")).expanduser() / "accelerate"
    return next((folder / name for name in NAMES if (folder / name).is_file()), folder / NAMES[0])


def read_config(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The config's mapping, or why it could not be read (in one line)."""
    from ds_doctor.userinput import MAX_CONFIG_BYTES, UserInputError, parse_json, parse_yaml, read_file

    if path.suffix == ".yaml" and importlib.util.find_spec("yaml") is None:
        return None, "unknown: PyYAML is not installed to read it (pip install pyyaml)"
    try:
        text = read_file(path, limit=MAX_CONFIG_BYTES, kind="config").text()
        data = parse_yaml(text, str(path)) if path.suffix == ".yaml" else parse_json(text, str(path))
    except UserInputError as exc:
        return None, f"unknown: {exc.message}"
    if not isinstance(data, dict):
        return None, f"unknown: {path} is no mapping of settings ({type(data).__name__})"
    return data, None


def collect_accelerate_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The `accelerate_config` section: the path, and the config's settings where the file exists."""
    path = default_config_path(os.environ if environ is None else environ)
    out: dict[str, Any] = {"path": str(path), "found": path.is_file(), "config": None, "unavailable": {}}
    if not out["found"]:
        out["unavailable"]["config"] = "none: Accelerate's defaults apply (`accelerate config` writes one)"
        return out
    out["config"], reason = read_config(path)
    if reason:
        out["unavailable"]["config"] = reason
    return out
