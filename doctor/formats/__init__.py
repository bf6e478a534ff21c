"""The formats `run` and `report` also write beside the report, one module each: option, check and writer together."""

# Each module of this package is one format: it declares `FORMAT`, an `OutputFormat` (its option names and help,
# whether the option names a file or a folder, what it needs installed, its writer), and nothing else of ds-doctor
# names it. The CLI builds each command's options, their checks before anything runs and the writing after the run
# from `formats()` (`ds_doctor.cli_outputs`); a module added here is a format of both commands. A format from
# outside this package (a site's own, a test's) is added with `register`, before the command line is parsed.

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ds_doctor.reports.model import Report


class Target(enum.Enum):
    """What a format's option names, which says how it is checked before anything runs."""

    FILE = "file"  # a regular file in a writable folder, or a stream (`/dev/null`, a FIFO); no input, no other output
    FOLDER = "folder"  # a folder of files the writer names, created where missing


class FormatError(Exception):
    """One line: a format cannot be written (a package it needs missing, a folder refused, a stream whose reader
    left). The CLI says it against the format's option, exit 2."""


@dataclasses.dataclass(frozen=True)
class WriteContext:
    """What a writer may read beside the report: `run --baseline`'s report and `--tolerance`."""

    baseline: Report | None = None
    tolerance_pct: float = 10.0


#: The report (already scrubbed), the path the option named, the context; the paths written.
Writer = Callable[[Report, Path, WriteContext], Sequence[Path]]


def nothing_to_require() -> None:
    """A format whose writer needs nothing beyond ds-doctor's own dependencies."""


_NAME = re.compile(r"[a-z][a-z0-9_]*")
_OPTION = re.compile(r"--[a-z][a-z0-9-]*")


@dataclasses.dataclass(frozen=True)
class OutputFormat:
    """One extra format: its option names (the first names it in every message), their help, what the option names
    (`target`), what it needs installed (`requires` raises `FormatError` saying how to get it; checked before the
    run), its writer, and the label the CLI lists its file under (None: not listed). A writer imports what it needs
    when it runs: a format's module stays cheap to import, as `--help` imports them all."""

    name: str  # the key of what it wrote (`paths["junit"]`), and of its option's value (`dest`)
    options: tuple[str, ...]
    help: str
    target: Target
    write: Writer
    requires: Callable[[], None] = nothing_to_require
    label: str | None = None
    stopped_runs: bool = (
        True  # also written for a run a signal stopped (the report of the cases that finished)
    )

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"format name {self.name!r}: lower-case letters, digits and _")
        if not self.options or not all(_OPTION.fullmatch(option) for option in self.options):
            raise ValueError(
                f"format {self.name!r}: its options are long options (--name), not {self.options}"
            )

    @property
    def option(self) -> str:
        """The option's name in messages (`--junit`, whichever spelling was typed)."""
        return self.options[0]

    @property
    def dest(self) -> str:
        """The option's value among the command's keyword arguments."""
        return f"{self.name}_output"


def text_file(render: Callable[[Report, WriteContext], str]) -> Writer:
    """The writer of a format that is one text file: `render`'s text written as every output a user names is
    (`ds_doctor.files.write_output`: a file replaced atomically, a stream written in place)."""

    def write(report: Report, path: Path, context: WriteContext) -> list[Path]:
        from ds_doctor.files import OutputError, write_output

        try:
            write_output(path, render(report, context))
        except OutputError as exc:
            raise FormatError(str(exc)) from None
        return [path]

    return write


@functools.cache
def built_in() -> tuple[OutputFormat, ...]:
    """This package's formats, in the order of their modules' names."""
    found = []
    for name in sorted(module.name for module in pkgutil.iter_modules(__path__)):
        declared = getattr(importlib.import_module(f"{__name__}.{name}"), "FORMAT", None)
        if not isinstance(declared, OutputFormat):
            raise TypeError(f"{__name__}.{name} is no format: it declares no FORMAT (an OutputFormat)")
        found.append(declared)
    return tuple(found)


_ADDED: dict[str, OutputFormat] = {}


def formats() -> tuple[OutputFormat, ...]:
    """Every format: this package's, then those registered, in the order they were."""
    return (*built_in(), *_ADDED.values())


def register(added: OutputFormat) -> OutputFormat:
    """A format from outside this package; a name or an option another format has is refused, naming both."""
    for other in formats():
        if other.name == added.name or set(other.options) & set(added.options):
            raise ValueError(
                f"format {added.name!r} ({', '.join(added.options)}) clashes with format {other.name!r} "
                f"({', '.join(other.options)})"
            )
    _ADDED[added.name] = added
    return added


@contextlib.contextmanager
def registered(added: OutputFormat) -> Iterator[OutputFormat]:
    """`added` registered for the time of a `with` block (a test's, a wrapper's single invocation)."""
    register(added)
    try:
        yield added
    finally:
        _ADDED.pop(added.name, None)
