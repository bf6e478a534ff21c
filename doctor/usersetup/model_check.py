"""`--model package.module:factory`, checked in a process of its own before anything launches.

The check imports the user's module and calls the factory: user code. In the parent it could hang the run
unbounded, end it with exit 0 through `sys.exit(0)` and nothing written, print its own argparse usage as if it were
ds-doctor's, or flood the `--json` stream with its prints. In a child it is bounded by the case timeout, its output
goes to a file (the tail shown on a failure), and whatever it does ends as one line naming the stage it reached.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ds_doctor.files import log_tail, write_atomic
from ds_doctor.procs import kill_tree, module_command
from ds_doctor.usersetup.model import ModelSpec, ModelSpecError, check

#: The bound when `--timeout` is not given: importing torch and transformers and one forward of a tiny model
CHECK_BOUND_S = 300.0


def check_in_child(text: str, freeze: str | None = None, bound_s: float | None = None) -> ModelSpec:
    """The spec, or ModelSpecError with one line: the factory's error, the stage a hang or an exit reached."""
    spec = ModelSpec.parse(text)
    if spec.kind == "hf":
        return check(text, freeze)  # transformers' own classes: no user code runs
    bound = bound_s or CHECK_BOUND_S
    with tempfile.TemporaryDirectory(prefix="ds-doctor-model-check-") as folder:
        result, log = Path(folder) / "result.json", Path(folder) / "output.log"
        command = [*module_command(__name__), "--spec", text, "--result", str(result)]
        command += ["--freeze", freeze] if freeze is not None else []
        with log.open("wb") as output:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = proc.wait(bound)
            except subprocess.TimeoutExpired:
                kill_tree(proc)
                raise ModelSpecError(
                    f"--model {text}: did not finish within {bound:.0f} s, at the stage "
                    f"{_stage(result)!r} (raise --timeout if it is only slow)"
                ) from None
        return _verdict(spec, result, code, log)


def _stage(result: Path) -> str:
    try:
        return str(json.loads(result.read_text()).get("stage", "starting"))
    except (OSError, ValueError, AttributeError):
        return "starting"


def _verdict(spec: ModelSpec, result: Path, code: int, log: Path) -> ModelSpec:
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError):
        data = {}
    if data.get("ok") is True:
        return spec
    if isinstance(data.get("error"), str):
        raise ModelSpecError(data["error"])
    tail = " ".join(log_tail(log, lines=3).split())[-300:]
    raise ModelSpecError(
        f"--model {spec.text}: its code ended the check's process with exit code {code} at the stage "
        f"{_stage(result)!r} (a sys.exit() or an argparse at import?)"
        + (f"; it printed: {tail}" if tail else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ds-doctor --model check")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--freeze")
    parser.add_argument("--result", required=True, type=Path)
    args = parser.parse_args(argv)
    sys.argv = sys.argv[:1]  # user code that parses the command line at import sees none of ours

    def stage(name: str) -> None:
        write_atomic(args.result, json.dumps({"stage": name}), fsync=False)

    try:
        check(args.spec, args.freeze, stage)
    except ModelSpecError as exc:
        write_atomic(args.result, json.dumps({"error": str(exc)}))
        return 1
    write_atomic(args.result, json.dumps({"ok": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
