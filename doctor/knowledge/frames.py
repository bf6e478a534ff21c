"""Where each entry's message is raised: the function and exception type, read from the installed sources.

`python -m ds_doctor.knowledge.frames --write` reads, for each wording of a catalog entry whose source is a Python
file, that file of the installed distribution, finds the function holding the message's words and the `raise` that
raises them, and writes the function, the exception type and how many times that function raises that type to
`data/frames.toml` (a file of its own, not the entries': it is generated). Triage's frame match
(`ds_doctor.knowledge.structure`) reads it: a traceback raising the same type from the same function in other words
is "possibly" the entry. `--check` says whether the file is what the installed sources give (a test runs it).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import sys
from collections.abc import Iterable, Iterator
from importlib import metadata, resources
from pathlib import Path

from ds_doctor.knowledge.issues import KnownIssue
from ds_doctor.knowledge.structure import Frame, load_frames

FRAGMENT_MIN = 16  # characters of a string literal that tie it to a wording...
COVERED = 0.5  # ...and the share of the wording a function's literals must hold
_HEADER = (
    "# Where each entry's message is raised (function, exception type, how many raises of that type the function\n"
    "# has), read from the installed sources. Generated: python -m ds_doctor.knowledge.frames --write; do not edit.\n"
    "format = 1\n"
)


def _words(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def _literals(node: ast.AST) -> Iterator[tuple[str, int]]:
    """The string literals under `node` (an f-string's constant parts each), with their lines."""
    for child in ast.walk(node):
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            yield child.value, child.lineno
        elif isinstance(child, ast.JoinedStr):
            for part in child.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    yield part.value, child.lineno


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function, not those of functions or classes defined inside it."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _raised_type(node: ast.Raise) -> str | None:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    if isinstance(exc, ast.Name):
        return exc.id
    if isinstance(exc, ast.Attribute):
        return exc.attr
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _assigned_at(function: ast.AST, line: int) -> set[str]:
    """The names a statement of `function` holding `line` assigns (a message built before its `raise`)."""
    return {
        target.id
        for node in _own_nodes(function)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        and node.lineno <= line <= (node.end_lineno or node.lineno)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


Function = ast.FunctionDef | ast.AsyncFunctionDef


@functools.lru_cache(maxsize=64)
def _function_literals(tree: ast.Module) -> tuple[tuple[Function, tuple[tuple[str, int], ...]], ...]:
    """Each function of a module with its own string literals (words normalised, long enough to tie a wording),
    walked once for every wording the module raises."""
    return tuple(
        (
            function,
            tuple(
                (piece, line)
                for node in _own_nodes(function)
                if isinstance(node, (ast.Constant, ast.JoinedStr))
                for value, line in _literals(node)
                if len(piece := _words(value)) >= FRAGMENT_MIN
            ),
        )
        for function in _functions(tree)
    )


def _holders(tree: ast.Module, wording: str) -> Iterator[tuple[Function, int]]:
    """Each function whose own literals hold most of the wording (a generic template, "object has no attribute"
    filled with names, ties no check to it), with the first such literal's line."""
    for function, literals in _function_literals(tree):
        pieces = [(piece, line) for piece, line in literals if piece in wording]
        covered = sum(len(piece) for piece in {piece for piece, _ in pieces})
        if pieces and covered >= COVERED * len(wording):
            yield function, min(line for _, line in pieces)


@functools.lru_cache(maxsize=64)
def _parsed(source: str) -> ast.Module | None:
    """A module's tree, parsed once for all the wordings its file raises (trainer.py holds many)."""
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def frames_of(source: str, wording: str, issue: str, read: str) -> list[Frame]:
    """Where `source` (a module's text) raises `wording`: each function and the exception type it raises it with
    (none for a message it logs, warns or builds elsewhere). `file` is left to the caller."""
    tree = _parsed(source)
    if tree is None:
        return []
    found = []
    for function, line in _holders(tree, _words(wording)):
        raises = [n for n in _own_nodes(function) if isinstance(n, ast.Raise) and n.exc is not None]
        holding = [n for n in raises if n.lineno <= line <= (n.end_lineno or n.lineno)] or [
            n for n in raises if _names(n) & _assigned_at(function, line)
        ]
        kind = _raised_type(holding[0]) if holding else None
        if kind is not None and kind[:1].isupper():
            count = sum(1 for n in raises if _raised_type(n) == kind)
            found.append(Frame(issue, "", function.name, kind, count, read))
    return found


def frames(issues: Iterable[KnownIssue]) -> list[Frame]:
    """The frames of every wording with a Python source, read in the installed distributions."""
    rows: dict[tuple[str, str, str, str], Frame] = {}
    for issue in issues:
        for wording in issue.wordings:
            dist, file = wording.source.split(" ", 1)
            # a message in C++ has no Python frame; another library's check is not the entry's
            if not file.endswith(".py") or dist != issue.package:
                continue
            try:
                path = Path(str(metadata.distribution(dist).locate_file(file)))
                version = metadata.version(dist)
                text = path.read_text(encoding="utf-8")
            except (metadata.PackageNotFoundError, OSError, UnicodeDecodeError):
                continue
            for frame in frames_of(text, wording.text, issue.id, f"{dist} {version}"):
                frame = dataclasses.replace(frame, file=file)
                rows.setdefault((issue.id, file, frame.function, frame.exception), frame)
    return list(rows.values())


def _toml(value: str) -> str:
    return "'" + value + "'" if "'" not in value and "\n" not in value else repr(value).replace("\\'", "'")


def render(rows: Iterable[Frame]) -> str:
    out = [_HEADER]
    for row in rows:
        out.append(
            "\n[[frame]]\n"
            f"issue = {_toml(row.issue)}\nfile = {_toml(row.file)}\nfunction = {_toml(row.function)}\n"
            f"exception = {_toml(row.exception)}\nraises = {row.raises}\nread = {_toml(row.read)}\n"
        )
    return "".join(out)


def shipped() -> tuple[Frame, ...]:
    return load_frames((resources.files("ds_doctor.knowledge") / "data" / "frames.toml").read_text("utf-8"))


def main(argv: list[str] | None = None) -> int:
    from ds_doctor.knowledge.catalog import ISSUES

    parser = argparse.ArgumentParser(prog="python -m ds_doctor.knowledge.frames", description=__doc__)
    parser.add_argument("--write", action="store_true", help="write data/frames.toml")
    parser.add_argument("--check", action="store_true", help="exit 1 where data/frames.toml is not current")
    args = parser.parse_args(argv)
    text = render(frames(ISSUES))
    target = Path(__file__).resolve().parent / "data" / "frames.toml"
    if args.write:
        target.write_text(text, encoding="utf-8")
    if args.check and target.read_text(encoding="utf-8") != text:
        print(
            f"{target} is not what the installed sources give: python -m ds_doctor.knowledge.frames --write"
        )
        return 1
    if not (args.write or args.check):
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
