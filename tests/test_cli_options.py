"""`run`'s options, each defined once (`ds_doctor.cli_options`): the definitions make click's options, fill the run's
options and the ranks'. No run: the command line is parsed and resolved as `run` does, in milliseconds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ds_doctor.cli import CliState, cli, resolve_options
from ds_doctor.cli_options import (
    BUILT_IN,
    KEYWORD,
    LEVEL,
    NPROC,
    WITH,
    Given,
    Into,
    Option,
    RunCommand,
    register,
    registered,
    run_options,
)
from ds_doctor.probe.rankoptions import DEFAULTS, RankOptions, RankOptionsError
from ds_doctor.run.pipeline import RunOptions

TOY_RUN: Option[int] = Option(
    "toy_steps",
    ("--toy-steps",),
    3,
    "A toy's steps.",
    type=click.IntRange(1, 9),
    show_default=True,
    into=Into.RUN,
)
TOY_RANKS: Option[str | None] = Option(
    "toy_mode", ("--toy-mode",), None, "A toy's mode, on every rank.", metavar="MODE", into=Into.RANKS
)


def parsed(*args: str) -> Given:
    """`run`'s command line as click parses it, read by the definitions (as `ds_doctor.cli.run` reads it)."""
    command = cli.commands["run"]
    assert isinstance(command, RunCommand)
    with command.make_context("run", list(args)) as ctx:
        values = dict(ctx.params)
    for name in [name for name in values if name.endswith("_output")]:  # the extra formats' (`Outputs.take`)
        del values[name]
    return Given(values, run_options())


def resolved(tmp_path: Path, *args: str) -> RunOptions:
    options, baseline = resolve_options(
        CliState(["run", *args]), parsed(*args, "--out", str(tmp_path / "out"))
    )
    assert baseline is None
    return options


def run_help() -> str:
    result = CliRunner().invoke(cli, ["run", "--help"], obj=CliState([]), terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def test_each_definition_is_an_option_of_run_in_its_order() -> None:
    shown = run_help()
    places = [shown.index(f"  {option.spelling}") for option in BUILT_IN]
    assert places == sorted(places)
    assert "--nproc, --nproc-per-node, --nproc_per_node INTEGER RANGE" in shown
    assert shown.index("--junit") > shown.index(
        "--anonymize"
    )  # the extra formats after --anonymize, as before


def test_the_values_are_read_by_their_definition_and_typed() -> None:
    given = parsed("--level", "3", "-k", "comm", "--nproc_per_node", "4", "--with", "a==1", "--with", "b==2")
    assert given[LEVEL] == 3 and given[KEYWORD] == "comm" and given[NPROC] == 4
    assert given[WITH] == ("a==1", "b==2")
    assert parsed()[LEVEL] == LEVEL.default and parsed()[WITH] == ()
    with pytest.raises(KeyError, match="no value parsed for level"):
        Given({}, (LEVEL,))


def test_the_definitions_fill_the_run_options_and_the_ranks(tmp_path: Path) -> None:
    options = resolved(
        tmp_path, "--level", "1", "--nproc", "2", "--timeout", "7", "--anonymize", "--suspect-below", "0.25"
    )
    assert (options.level, options.nproc, options.timeout_s, options.anonymized) == (1, 2, 7.0, True)
    assert options.rank.suspect_below == 0.25 and options.rank.freeze is None
    assert options.out_dir == tmp_path / "out" and options.argv[0] == "run" and options.added == ()


def test_every_built_in_definition_names_a_field_of_its_value_with_the_same_default() -> None:
    """A definition marked for the run or the ranks fills that field: the field exists, and a run that names no
    option holds the definition's default."""
    for option in BUILT_IN:
        if option.into is Into.COMMAND:
            continue
        kept = RunOptions() if option.into is Into.RUN else DEFAULTS
        assert option.target in {f.name for f in dataclasses.fields(kept)}, option.name
        assert getattr(kept, option.target) == option.default, option.name
    marked = {option.target for option in BUILT_IN if option.into is Into.RANKS}
    assert marked == {"deepspeed_config", "accelerate_config", "model", "freeze", "suspect_below", "matrix"}


def test_a_toy_option_appears_in_the_help_and_reaches_the_run_options(tmp_path: Path) -> None:
    with registered(TOY_RUN):
        shown = run_help()
        assert "--toy-steps INTEGER RANGE" in shown and "A toy's steps.  [default: 3; 1<=x<=9]" in shown
        assert shown.index("--toy-steps") > shown.index("--ignore-pins")  # after ds-doctor's own
        options = resolved(tmp_path, "--level", "1", "--toy-steps", "5")
        assert dict(options.added) == {"toy_steps": 5} and options.rank.added == ()
        assert dict(resolved(tmp_path, "--level", "1").added) == {"toy_steps": 3}
        assert "'--toy-steps': 10 is not in the range 1<=x<=9" in _usage_error(tmp_path, "--toy-steps", "10")
    assert "--toy-steps" not in run_help()


def test_a_toy_option_marked_for_the_ranks_reaches_them_and_their_json(tmp_path: Path) -> None:
    with registered(TOY_RANKS):
        assert "--toy-mode MODE" in run_help()
        rank = resolved(tmp_path, "--level", "1", "--toy-mode", "fast").rank
        assert rank.added == (("toy_mode", "fast"),)
        assert RankOptions.from_json(rank.to_json()) == rank
        assert json.loads(rank.to_json())["added"] == {"toy_mode": "fast"}
        assert resolved(tmp_path, "--level", "1").rank.added == (("toy_mode", None),)


def _usage_error(tmp_path: Path, *args: str) -> str:
    """The one line `run` says of a refused command line (exit 2)."""
    result = CliRunner().invoke(cli, ["run", *args, "--out", str(tmp_path / "o")], obj=CliState([]))
    assert result.exit_code == 2 and not (tmp_path / "o").exists(), result.output
    return result.output


def test_an_added_option_may_not_take_a_name_or_spelling_another_has() -> None:
    for clash in (
        Option("level", ("--toy",), 0, "x", into=Into.RUN),
        Option("toy", ("--nproc-per-node",), 0, "x", into=Into.RUN),
        Option("toy", ("--junitxml",), None, "x", into=Into.RUN),  # an extra format's
    ):
        with pytest.raises(ValueError, match="clashes with"):
            register(clash)
    with pytest.raises(ValueError, match="goes into the run's options"):
        register(Option("toy", ("--toy",), None, "x"))
    with pytest.raises(ValueError, match="goes into the run's options"):
        register(Option("toy", ("--toy",), (), "x", multiple=True, into=Into.RANKS))
    with pytest.raises(ValueError, match="under its own name"):
        register(Option("toy", ("--toy",), 0, "x", into=Into.RUN, field="level"))
    for field in ("cluster", "extensions_dir", "added"):  # a value the parent fills, not an option
        with pytest.raises(ValueError, match="have a field of that name"):
            register(Option(field, ("--toy",), None, "x", into=Into.RANKS))
    assert run_options() == BUILT_IN


def test_the_ranks_options_round_trip_through_their_json_as_before(tmp_path: Path) -> None:
    options = RankOptions.of(
        {"deepspeed_config": "/x/ds.json", "model": "hf:qwen3", "freeze": None, "suspect_below": 0.5}
    )
    assert options == RankOptions(deepspeed_config="/x/ds.json", model="hf:qwen3")
    assert "added" not in json.loads(
        options.to_json()
    )  # the file as a ds-doctor before added options wrote it
    assert RankOptions.from_json(options.to_json()) == options
    with_added = dataclasses.replace(options, added=(("a", 1), ("b", True), ("c", None)))
    assert RankOptions.from_json(with_added.to_json()) == with_added
    for text in ('{"added": [1]}', '{"added": {"a": [1]}}', '{"added": {"a": {"b": 1}}}'):
        with pytest.raises(RankOptionsError, match="added is not an object of single values"):
            RankOptions.from_json(text)
    with pytest.raises(RankOptionsError, match="model is int"):
        RankOptions.of({"model": 3})
