"""Run every reproduction here again and check triage names its entry on what it prints now (`make verify-repro`).

Each `<entry id>.py` says how it is run in its docstring ("Run: python ..." or "Run: torchrun --nproc-per-node 2
..."); it is run that way from the repository root, with a timeout, and what it printed (stdout and stderr) goes
through `ds-doctor triage`'s reading. A line per script: the entry, whether it was named (and how strongly), the
seconds. Exit 1 where one was not named or did not finish. Not part of `make test`: the scripts take minutes.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
_RUN = re.compile(r"^[\s\"']*Run:\s*(?P<command>.+?)\s*$", re.MULTILINE)


def command_of(script: Path) -> list[str]:
    """How a reproduction is run: its docstring's "Run:" line, with this interpreter and its torchrun."""
    found = _RUN.search(script.read_text(encoding="utf-8")[:4000])
    words = shlex.split(found["command"]) if found else ["python", str(script.relative_to(ROOT))]
    bin_dir = Path(sys.executable).parent
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    if words[0] == "torchrun":
        return [str(bin_dir / "torchrun"), *words[1:]]
    return words


def check(script: Path, timeout: float) -> tuple[bool, str]:
    from ds_doctor.knowledge.triage import triage

    started = time.monotonic()
    try:
        done = subprocess.run(
            command_of(script), cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return False, f"did not finish in {timeout:g} s"
    named = {m.issue.id: m.strength for m in triage(done.stdout + "\n" + done.stderr, {})}
    seconds = time.monotonic() - started
    if script.stem in named:
        return True, f"named ({named[script.stem]}), {seconds:.1f} s"
    return (
        False,
        f"not named (named: {', '.join(named) or 'nothing'}; exit {done.returncode}), {seconds:.1f} s",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entries", nargs="*", help="entry ids (default: every script here)")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    scripts = [p for p in sorted(HERE.glob("*.py")) if p.name != Path(__file__).name]
    scripts = [p for p in scripts if not args.entries or p.stem in args.entries]
    failed = 0
    for script in scripts:
        ok, said = check(script, args.timeout)
        failed += not ok
        print(f"{'ok ' if ok else 'BAD'} {script.stem:<48} {said}", flush=True)
    print(f"{len(scripts) - failed} of {len(scripts)} reproductions named as their entry")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
