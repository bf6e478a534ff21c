"""`ds-doctor run`'s options, each defined once: an `Option` (its names, type, default, help, and where its value
goes), from which click's options are made.

`run` offers every definition, in this order (each extra format's option after `--anonymize`: `ds_doctor.formats`);
`report` shares `--json` and `--anonymize`. What click parsed comes back as one typed value, `Given` (`given[LEVEL]`
is an int), which fills the run's options (`RunOptions`, the definitions marked `Into.RUN`) and the ranks'
(`RankOptions`, those marked `Into.RANKS`); the rest the command reads itself (its outputs, or what it resolves
into the run's options: the nodes, the overlays, the folder). An option from outside ds-doctor (a site's, a test's)
is added with `register`: it appears in `run --help`, and its value reaches `RunOptions.added` or, marked for the
ranks, `RankOptions.added` (and so every rank's `ctx.options`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import click

from ds_doctor import options as bounds
from ds_doctor.cli_outputs import WithFormats
from ds_doctor.formats import formats

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
F = TypeVar("F", bound=Callable[..., object])


class Into(enum.Enum):
    """Where an option's value goes: `COMMAND`, the command reads it (its outputs, or what it resolves into the run's
    options: the nodes, the overlays, the reports' folder); `RUN`, the field of the run's options
    (`ds_doctor.run.pipeline.RunOptions`) it names; `RANKS`, the field of the ranks' options
    (`ds_doctor.probe.rankoptions.RankOptions`): every rank needs it."""

    COMMAND = "command"
    RUN = "run"
    RANKS = "ranks"


@dataclasses.dataclass(frozen=True)
class Option(Generic[T_co]):
    """One option of `run`: what click offers and checks (the `type` bounds a value: one line, exit 2, past them),
    and the field its value fills (`field`, where it is not `name`)."""

    name: str  # the value's name among the command's parameters
    flags: tuple[str, ...]  # every spelling, the first one named in click's messages
    default: T_co
    help: str
    type: click.ParamType | None = None
    metavar: str | None = None
    flag: bool = False  # takes no value: present or not
    multiple: bool = False  # repeatable: a tuple of every value given
    show_default: bool = False
    into: Into = Into.COMMAND
    field: str | None = None

    @property
    def spelling(self) -> str:
        """The option's name in messages (`--nproc`, whichever spelling was typed)."""
        return self.flags[0]

    @property
    def target(self) -> str:
        """The field of `RunOptions` or `RankOptions` the value fills."""
        return self.field or self.name

    def click_attributes(self) -> dict[str, Any]:
        """click's keyword arguments, only those that differ from its own defaults (the help stays as written)."""
        clicks_own = (self.flag and self.default is False) or (self.multiple and self.default == ())
        given = {
            "type": self.type,
            "metavar": self.metavar,
            "is_flag": self.flag or None,
            "multiple": self.multiple or None,
            "show_default": self.show_default or None,
            "default": None if clicks_own else self.default,
        }
        return {"help": self.help, **{key: value for key, value in given.items() if value is not None}}

    def decorate(self, command: F) -> F:
        """The option added to a command declared with click's decorators (`report` shares `run`'s)."""
        return click.option(*self.flags, self.name, **self.click_attributes())(command)


@functools.cache
def click_option(option: Option[object]) -> click.Option:
    """An option's click option, made once (click matches the options it parsed to those it processes by identity)."""
    return click.Option([*option.flags, option.name], **option.click_attributes())


LEVEL: Option[int] = Option(
    "level",
    ("--level",),
    2,
    "1: environment and hardware only; 2: one representative case per family; 3: every case.",
    type=click.IntRange(1, 3),
    show_default=True,
    into=Into.RUN,
)
KEYWORD: Option[str | None] = Option(
    "keyword",
    ("-k",),
    None,
    "Select cases by name: substrings with and/or/not, as pytest -k.",
    metavar="EXPR",
    into=Into.RUN,
)
OUT: Option[Path] = Option(
    "out_dir",
    ("--out",),
    Path("ds-doctor-reports"),
    "Directory for the JSON and Markdown reports and the run directory.",
    type=click.Path(path_type=Path),
    show_default=True,
)
JSON: Option[bool] = Option(
    "json_stdout", ("--json",), False, "Also print the JSON report to stdout.", flag=True
)
NPROC: Option[int | None] = Option(
    "nproc",
    ("--nproc", "--nproc-per-node", "--nproc_per_node"),
    None,
    "Ranks for multi-rank cases (default: GPUs, or 2 on CPU); torchrun's spellings work too.",
    type=bounds.NPROC,
    into=Into.RUN,
)
TIMEOUT: Option[float | None] = Option(
    "timeout_s",
    ("--timeout",),
    None,
    "Per-case timeout in seconds, overriding each family's own.",
    type=bounds.SECONDS,
    into=Into.RUN,
)
ANONYMIZE: Option[bool] = Option(
    "anonymize",
    ("--anonymize",),
    False,
    "Also replace host and user names, IP addresses and GPU UUIDs.",
    flag=True,
    into=Into.RUN,
    field="anonymized",
)
BASELINE: Option[Path | None] = Option(
    "baseline_file",
    ("--baseline",),
    None,
    "A report of this node to diff the run against (exit 1 on a regression).",
    type=click.Path(path_type=Path),
)
TOLERANCE: Option[float] = Option(
    "tolerance_pct",
    ("--tolerance",),
    10.0,
    "With --baseline: percent a bandwidth or TFLOP/s may drop before it is a regression.",
    type=bounds.TOLERANCE,
    show_default=True,
)
NNODES: Option[int | None] = Option(
    "nnodes",
    ("--nnodes",),
    None,
    "Nodes in the run (as torchrun's --nnodes); srun: SLURM_NNODES.",
    type=bounds.NNODES,
)
NODE_RANK: Option[int | None] = Option(
    "node_rank",
    ("--node-rank",),
    None,
    "This node's rank, 0 writes the report (as torchrun's).",
    type=bounds.NODE_RANK,
)
RDZV_ENDPOINT: Option[str | None] = Option(
    "rdzv_endpoint",
    ("--rdzv-endpoint",),
    None,
    "torchrun's c10d rendezvous endpoint, the same on every node.",
    metavar="HOST:PORT",
)
RDZV_ID: Option[str | None] = Option(
    "rdzv_id",
    ("--rdzv-id",),
    None,
    "The rendezvous id, the same on every node (default: ds-doctor; srun: the job id).",
)
JOIN_TIMEOUT: Option[float] = Option(
    "join_timeout_s",
    ("--join-timeout",),
    300.0,
    "Seconds a node waits for the others at each rendezvous before naming them.",
    type=bounds.SECONDS,
    show_default=True,
)
SUSPECT_BELOW: Option[float] = Option(
    "suspect_below",
    ("--suspect-below",),
    0.5,
    "fabric: a node whose every pair is below this fraction of the median pair is the suspect.",
    type=bounds.FRACTION,
    show_default=True,
    into=Into.RANKS,
)
DEEPSPEED_CONFIG: Option[str | None] = Option(
    "ds_config",
    ("--deepspeed-config",),
    None,
    "Your DeepSpeed JSON: the DeepSpeed families gain cases built from it (`auto` filled, changes listed).",
    metavar="FILE",
    into=Into.RANKS,
    field="deepspeed_config",
)
ACCELERATE_CONFIG: Option[str | None] = Option(
    "acc_config",
    ("--accelerate-config",),
    None,
    "Your Accelerate YAML (what `accelerate config` writes): the Accelerate families gain cases built from it.",
    metavar="FILE",
    into=Into.RANKS,
    field="accelerate_config",
)
MODEL: Option[str | None] = Option(
    "model_spec",
    ("--model",),
    None,
    "Train your model in place of the tiny ones: hf:<model_type> (e.g. hf:qwen3) or package.module:factory.",
    metavar="SPEC",
    into=Into.RANKS,
    field="model",
)
FREEZE: Option[str | None] = Option(
    "freeze",
    ("--freeze",),
    None,
    "With --model: the parameters S1 freezes (fnmatch on names; default: the input embedding).",
    metavar="PATTERN",
    into=Into.RANKS,
)
MATRIX: Option[str] = Option(
    "matrix",
    ("--matrix",),
    "pairs",
    "equivalence's knob matrix at level 3: every pair of knob values ('pairs'), or every combination ('full').",
    type=click.Choice(["pairs", "full"]),
    show_default=True,
    into=Into.RANKS,
)
WITH: Option[tuple[str, ...]] = Option(
    "with_releases",
    ("--with",),
    (),
    "Run the selected cases again on an overlay adding these releases (repeatable; cached in "
    "~/.cache/ds-doctor/releases, never installed into this environment); the report compares the two.",
    metavar="PKG==VER",
    multiple=True,
)
FIND_LINKS: Option[Path | None] = Option(
    "find_links",
    ("--find-links",),
    None,
    "With --with: take the releases only from this folder of wheels/sdists (no index).",
    type=click.Path(path_type=Path),
    metavar="DIR",
)
IGNORE_PINS: Option[bool] = Option(
    "ignore_pins",
    ("--ignore-pins",),
    False,
    "With --with: install the named releases even where they pin this stack out (pip --no-deps); "
    "the report lists every pin ignored.",
    flag=True,
)

#: `run`'s own options, in the order its help lists them
BUILT_IN: tuple[Option[object], ...] = (
    LEVEL,
    KEYWORD,
    OUT,
    JSON,
    NPROC,
    TIMEOUT,
    ANONYMIZE,
    BASELINE,
    TOLERANCE,
    NNODES,
    NODE_RANK,
    RDZV_ENDPOINT,
    RDZV_ID,
    JOIN_TIMEOUT,
    SUSPECT_BELOW,
    DEEPSPEED_CONFIG,
    ACCELERATE_CONFIG,
    MODEL,
    FREEZE,
    MATRIX,
    WITH,
    FIND_LINKS,
    IGNORE_PINS,
)

_ADDED: dict[str, Option[object]] = {}


def run_options() -> tuple[Option[object], ...]:
    """Every option of `run`: ds-doctor's own, then those registered, in the order they were."""
    return (*BUILT_IN, *_ADDED.values())


def register(added: Option[T]) -> Option[T]:
    """An option from outside ds-doctor, for the run's options or the ranks' (one value each, kept under its name in
    their `added`); a name or a spelling another option (or an extra format's) has, or a field of those values, is
    refused, naming it."""
    if added.into is Into.COMMAND or (added.into is Into.RANKS and added.multiple) or added.field is not None:
        raise ValueError(
            f"option {added.name!r}: an added option goes into the run's options, or (one value) the ranks', "
            "under its own name"
        )
    taken = [(other.name, other.flags) for other in run_options()] + [(f.dest, f.options) for f in formats()]
    for name, flags in taken:
        if name == added.name or set(flags) & set(added.flags):
            raise ValueError(
                f"option {added.name!r} ({', '.join(added.flags)}) clashes with {name!r} ({', '.join(flags)})"
            )
    if added.name in _fields():
        raise ValueError(f"option {added.name!r}: the run's or the ranks' options have a field of that name")
    _ADDED[added.name] = added
    return added


def _fields() -> set[str]:
    """The fields of the run's and the ranks' options (the engine imported here: an option is added seldom)."""
    from ds_doctor.probe.rankoptions import RankOptions
    from ds_doctor.run.pipeline import RunOptions

    return {field.name for kind in (RunOptions, RankOptions) for field in dataclasses.fields(kind)}


@contextlib.contextmanager
def registered(added: Option[T]) -> Iterator[Option[T]]:
    """`added` registered for the time of a `with` block (a test's, a wrapper's single invocation)."""
    register(added)
    try:
        yield added
    finally:
        _ADDED.pop(added.name, None)


class DefinedOptions(click.Command):
    """A command whose options are `run`'s definitions (`run_options()`, read as its command line is parsed or its
    help shown), before its own parameters."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return [*(click_option(option) for option in run_options()), *super().get_params(ctx)]


class RunCommand(WithFormats, DefinedOptions):
    """`run`: an option per definition, each extra format's after `--anonymize` (`WithFormats`)."""


class Given:
    """The values click parsed for a command's options, read by their definition: `given[LEVEL]` is an int."""

    def __init__(self, values: Mapping[str, object], options: Sequence[Option[object]]) -> None:
        missing = [option.name for option in options if option.name not in values]
        if missing:
            raise KeyError(f"no value parsed for {', '.join(missing)}")
        self.values, self.options = dict(values), tuple(options)

    def __getitem__(self, option: Option[T]) -> T:
        return cast(T, self.values[option.name])

    def into(self, into: Into) -> dict[str, object]:
        """The values of the options marked `into`, by the field each fills."""
        return {option.target: self.values[option.name] for option in self.options if option.into is into}
