"""Run every reproduction here again and check triage names its entry on what it prints now (`make verify-repro`).

Each `<entry id>.py` says how it is run in its docstring ("Run: python ..." or "Run: torchrun --nproc-per-node 2
..."); it is run that way from the repository root, with a timeout, and what it printed (stdout and stderr) goes
through `ds-doctor triage`'s reading. A line per script: the entry, whether it was named (and how strongly), the
seconds. Exit 1 where one was not named or did not finish. A script that finds this machine cannot show its
failure (the hardware does what the failure needs it not to) says why and exits SKIP: counted apart, not a failure.
Not part of `make test`: the scripts take minutes.
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
#: the exit status of a script that cannot show its failure on this machine (automake's "skipped" status)
SKIP = 77
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


def check(script: Path, timeout: float) -> tuple[bool | None, str]:
    from ds_doctor.knowledge.triage import triage

    started = time.monotonic()
    try:
        done = subprocess.run(
            command_of(script), cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return False, f"did not finish in {timeout:g} s"
    seconds = time.monotonic() - started
    if done.returncode == SKIP:
        said = (done.stdout + done.stderr).strip().splitlines()
        return None, f"skipped: {said[-1] if said else 'no reason given'}"
    named = {m.issue.id: m.strength for m in triage(done.stdout + "\n" + done.stderr, {})}
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
    failed = skipped = 0
    for script in scripts:
        ok, said = check(script, args.timeout)
        failed += ok is False
        skipped += ok is None
        mark = "ok " if ok else "BAD" if ok is False else "-- "
        print(f"{mark} {script.stem:<48} {said}", flush=True)
    ran = len(scripts) - skipped
    print(
        f"{ran - failed} of {ran} reproductions named as their entry"
        + (f"; {skipped} could not show their failure on this machine" if skipped else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
