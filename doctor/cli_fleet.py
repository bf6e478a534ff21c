"""`ds-doctor fleet`: many nodes' reports (what `run` and the nightly job write) as one table.

Every file is read as `diff` reads one (`ds_doctor.run.recover.load_report_file`: size-bounded, checked against its
schema, scrubbed); a file it cannot use is one line, listed under "Reports left out", and the rest go on. With
nothing readable left it is a usage error (exit 2). In a directory the files `run` writes
(`ds-doctor-<host>-<UTC time>….json`) are found at any depth up to MAX_DEPTH (links to directories not followed),
and of one host's files in one directory only the newest by name is read once it reads well: a nightly STATE_DIR
keeps a month of reports per node, and reading one costs about as long as checking it against the schema.

Two kinds of file are left out, each named in one warning line, as anyone who can write into a shared reports
folder could plant them: a run dated in the future (`ds_doctor.fleet.facts.future_dated`: it would stand as its
host's latest for good, hiding the host's real reports), and, found in a directory, a link another user owns
(`ds_doctor.files.foreign_link`: following it would show a file that user cannot read). A user's own links are
followed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
import itertools
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from ds_doctor.checks.baseline import DEFAULT_TOLERANCE_PCT
from ds_doctor.files import entries_below, foreign_link
from ds_doctor.fleet.drift import MIN_NIGHTS, NightValue, Series, fitted
from ds_doctor.fleet.facts import FUTURE, NodeFacts, Source, build_fleet, facts_of, future_dated
from ds_doctor.options import TOLERANCE, check_distinct, check_writable_file, one_line, output_in
from ds_doctor.redact import printable
from ds_doctor.reports.fleet import Unreadable, render_fleet
from ds_doctor.reports.model import finite_json
from ds_doctor.table.rows import night_of

PATTERN = "ds-doctor-*.json"
FLEET_FILE = "ds-doctor-fleet.md"  # `--out FOLDER` writes the Markdown as this
#: `report_basename`'s names: the host (one safe path component), the start time, `report`'s suffix, a retry's pid.
NAME = re.compile(r"ds-doctor-(?P<host>.+)-(?P<time>\d{8}T\d{6}Z)(?:-report)?(?:-\d+-\d+)?\.json")
PLACEHOLDER = re.compile(r"host-\d+")  # `--anonymize` names every node so: such files name no node
#: Reports to read: the newest of each host, however many older ones a nightly STATE_DIR keeps (a month of 10,000
#: nodes is 300,000 files; the walk itself stops at MAX_ENTRIES)
MAX_FILES = 100_000
MAX_ENTRIES = 1_000_000  # directory entries looked at (a DIR of / stops here, not after the whole disk)
MAX_DEPTH = 16
#: The reasons a file is left out on purpose rather than unreadable: its warning line says so, not "unreadable"
LEFT_OUT = (FUTURE, "a link owned by another user")


@click.command()
@click.argument("sources", metavar="DIR|FILE...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--tolerance",
    "tolerance_pct",
    type=TOLERANCE,
    default=DEFAULT_TOLERANCE_PCT,
    show_default=True,
    help="Percent a bandwidth or TFLOP/s may fall below the fleet's median before the node is flagged.",
)
@click.option(
    "--since",
    metavar="SPAN|DATE",
    help="Also read every night from this one on (30d, 2w, 36h back, or a date) and name the nodes whose "
    "measures get worse night after night against the fleet.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the fleet as JSON.")
@click.option(
    "--out",
    "out_file",
    type=click.Path(path_type=Path),
    help=f"Also write the Markdown to this file, or into this folder as {FLEET_FILE}.",
)
@click.option(
    "--html",
    "html_file",
    type=click.Path(path_type=Path),
    help="Also write a self-contained HTML page (each node against the median) to this file or folder.",
)
def fleet(
    sources: tuple[Path, ...],
    tolerance_pct: float,
    since: str | None,
    as_json: bool,
    out_file: Path | None,
    html_file: Path | None,
) -> int:
    """Many nodes' reports as one table: the newest report of each host, its outcomes, GPU health fails, versions,
    driver and NCCL that differ from the fleet's majority, and each bandwidth and TFLOP/s against the fleet's
    median (among nodes with the same GPUs).

    Exit code 0 when no node has a failing case, 1 when one has (a GPU health fail included).
    """
    out_file = output_in(out_file, FLEET_FILE)
    html_file = output_in(html_file, FLEET_FILE.replace(".md", ".html"))
    check_writable_file(out_file, "--out")
    check_writable_file(html_file, "--html")
    check_distinct(
        {"--out": out_file, "--html": html_file}, {str(path): path for path in sources if not path.is_dir()}
    )
    first_night = _since(since)
    unreadable: list[Unreadable] = []
    read, series, not_read = _read(sources, first_night, unreadable)
    read = _not_future(read, unreadable)
    if not read:  # one line, as every usage error: the first file's reason, and how many more there are
        more = f" (and {len(unreadable) - 1} more unreadable file(s))" if len(unreadable) > 1 else ""
        first = unreadable[0]
        raise click.UsageError(f"no readable ds-doctor report: {first.source}: {first.reason}{more}")
    for entry in unreadable:
        what = entry.reason if entry.reason.startswith(LEFT_OUT) else f"unreadable: {entry.reason}"
        click.echo(f"ds-doctor: warning: {printable(f'{entry.source}: {what}')}", err=True)
    window = None
    drifting: list[Any] = []
    if first_night is not None:
        from ds_doctor.fleet.drift import drifting as drifting_of

        drifting = drifting_of(series, tolerance_pct)
        window = (
            f"{min(s.first_night for s in series)} to {max(s.last_night for s in series)}, up to "
            f"{max(s.nights for s in series)} night(s) of a node's measure"
            if series
            else f"from {first_night}: no node with {MIN_NIGHTS} nights of a measure"
        )
    built = build_fleet(read, unreadable, tolerance_pct, not_read, drifting, window)
    text = render_fleet(built)
    from ds_doctor.cli_outputs import write_user_output

    if out_file is not None:
        write_user_output(out_file, text, "--out")
    if html_file is not None:
        from ds_doctor.reports.html import render_fleet_html

        write_user_output(html_file, render_fleet_html(built), "--html")
    click.echo(
        json.dumps(finite_json(built.to_dict()), indent=2, allow_nan=False) if as_json else text, nl=as_json
    )
    return 1 if built.failed else 0


def _read(
    sources: tuple[Path, ...], first_night: dt.date | None, unreadable: list[Unreadable]
) -> tuple[list[NodeFacts], list[Series], int]:
    """The facts of each node (and with --since each measure's series across the nights, fitted) from results
    tables or from reports."""
    tables = [source for source in sources if is_table(source)]
    if not tables:
        groups = find_reports(sources, unreadable)
        if not groups and not unreadable:
            raise click.UsageError(f"no ds-doctor report ({PATTERN}) in {', '.join(map(str, sources))}")
        named = frozenset(str(source) for source in sources if not source.is_dir())
        facts, nights, not_read = read_reports(groups, unreadable, first_night, named)
        return facts, fitted(nights), not_read
    if len(tables) < len(sources):
        raise click.UsageError(
            "give either results tables (folders of night=…/ partitions, or s3://…) or reports"
        )
    from ds_doctor.table.parquet import TableError
    from ds_doctor.table.query import read_tables

    try:
        read, series = read_tables([table_url(t) for t in tables], first_night, unreadable)
    except TableError as exc:
        raise click.UsageError(one_line(str(exc))) from None
    if not read and not unreadable:  # with files left out, `fleet` names the first of them
        raise click.UsageError(f"no node's run in {', '.join(map(str, tables))}" + _window(first_night))
    return read, series, 0


def _not_future(facts: list[NodeFacts], unreadable: list[Unreadable]) -> list[NodeFacts]:
    """`facts` less the runs dated in the future (`future_dated`), each named in `unreadable`. The reports' readers
    leave such runs out already, reading on to the host's older files; a results table's rows come here."""
    kept = []
    for fact in facts:
        why = future_dated(fact.started_at, fact.finished_at)
        if why is None:
            kept.append(fact)
        else:
            unreadable.append(Unreadable(fact.source, why))
    return kept


def _since(text: str | None) -> dt.date | None:
    if text is None:
        return None
    from ds_doctor.fleet.drift import parse_since

    try:
        return parse_since(text, dt.datetime.now(dt.timezone.utc))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None


def _window(first: dt.date | None) -> str:
    return f" from {first} on" if first else ""


def table_url(source: Path) -> str:
    """A remote prefix as given (a path made `s3:/bucket` of `s3://bucket`), else the folder."""
    from ds_doctor.table.query import REMOTE

    text = str(source)
    return text.replace(":/", "://", 1) if REMOTE.match(text.replace(":/", "://", 1)) else text


def is_table(source: Path) -> bool:
    """A results table (`ds_doctor.reports.table`): a folder with night=… partitions, or a remote prefix."""
    from ds_doctor.table.query import REMOTE

    if REMOTE.match(table_url(source)):
        return True
    try:
        return source.is_dir() and any(
            p.name.startswith("night=") for p in itertools.islice(source.iterdir(), 1000)
        )
    except OSError:
        return False


def find_reports(sources: tuple[Path, ...], unreadable: list[Unreadable]) -> list[list[Path]]:
    """The report files to read, grouped: one host's files in one directory (newest first by name), every other
    file alone. A file named on the command line is read whatever its name."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files += _walk(source, unreadable)
        else:
            files.append(source)
    groups: dict[tuple[str, str], list[tuple[str, Path]]] = {}
    alone, seen = [], set()
    for path in files:
        if os.path.realpath(path) in seen:
            continue
        seen.add(os.path.realpath(path))
        match = NAME.fullmatch(path.name)
        if match is None or PLACEHOLDER.fullmatch(match["host"]):
            alone.append([path])
        else:
            groups.setdefault((str(path.parent), match["host"]), []).append((match["time"], path))
    if len(groups) + len(alone) > MAX_FILES:
        raise click.UsageError(
            f"{len(groups) + len(alone):,} reports: ds-doctor fleet reads at most {MAX_FILES:,} (the newest of "
            "each host; name fewer)"
        )
    ordered = [
        [path for _, path in sorted(group, key=lambda item: (item[0], item[1].name), reverse=True)]
        for _, group in sorted(groups.items())
    ]
    return ordered + alone


def _walk(root: Path, unreadable: list[Unreadable]) -> list[Path]:
    """The files named as `run` names its reports under `root`, without following links to directories."""
    found: list[Path] = []

    def unlisted(folder: Path, exc: OSError) -> None:
        unreadable.append(Unreadable(str(folder), f"cannot list it: {exc.strerror or exc}"))

    for entries, entry in enumerate(entries_below(root, MAX_DEPTH, unlisted), start=1):
        if entries > MAX_ENTRIES:
            raise click.UsageError(
                f"{root}: more than {MAX_ENTRIES:,} entries below it: name the reports' folder"
            )
        try:
            _take(entry, found, unreadable)
        except OSError as exc:  # the entry vanished or cannot be examined
            unreadable.append(Unreadable(entry.path, exc.strerror or str(exc)))
    return sorted(found)


def _take(entry: os.DirEntry[str], found: list[Path], unreadable: list[Unreadable]) -> None:
    """One directory entry of the walk: a report file, or neither (a folder is walked by `entries_below`). A link
    another user owns is left out: whoever can write into the folder chose where it leads."""
    if entry.is_dir(follow_symlinks=False) or not fnmatch.fnmatchcase(entry.name, PATTERN):
        return
    owner = foreign_link(Path(entry.path)) if entry.is_symlink() else None
    if owner is not None:
        unreadable.append(Unreadable(entry.path, _foreign(owner)))
    elif entry.is_file():
        found.append(Path(entry.path))
    else:  # a FIFO would block the read, a device never end it
        unreadable.append(Unreadable(entry.path, "not a regular file"))


def _foreign(owner: int) -> str:
    return f"a link owned by another user (uid {owner}): not followed"


@dataclasses.dataclass
class GroupRead:
    """What a reader process sends back of one group of files: facts, never reports."""

    facts: list[NodeFacts] = dataclasses.field(
        default_factory=list
    )  # the newest that read well (and any read first)
    nights: list[NightValue] = dataclasses.field(default_factory=list)  # with --since: every run's measures
    unreadable: list[Unreadable] = dataclasses.field(default_factory=list)
    not_read: int = 0


def read_group(
    group: list[Path], since: dt.date | None = None, named: frozenset[str] = frozenset()
) -> GroupRead:
    """One host's files in one folder, newest first: without `since`, read until one reads well and is the host its
    name says (the rest not read, counted); with it, every file of a night from `since` on (its measures for the
    drift), the newest that reads well giving tonight's facts. Each report is read as a summary (`summary_of`),
    checked and scrubbed as such, turned into facts and dropped. A run dated in the future is left out (and the
    older files read on); so is a file found in a folder (not one of the `named` on the command line) that has
    become a link another user owns since the walk found it."""
    from ds_doctor.files import safe_component
    from ds_doctor.run.recover import InputError, load_report_file

    done = GroupRead()
    for index, path in enumerate(group):
        match = NAME.fullmatch(path.name)
        if since is not None and match and _night_of(match["time"]) < since:
            done.not_read += len(group) - index  # newest first: every one after it is older still
            break
        owner = foreign_link(path) if str(path) not in named else None
        if owner is not None:
            done.unreadable.append(Unreadable(str(path), _foreign(owner)))
            continue
        try:
            source = Source(str(path), load_report_file(path, summary=True))
        except InputError as exc:
            done.unreadable.append(Unreadable(str(path), str(exc).removeprefix(f"{path}: ")))
            continue
        problem = _times_problem(source) or future_dated(source.report.started_at, source.report.finished_at)
        if problem:
            done.unreadable.append(Unreadable(str(path), problem))
            continue
        facts = facts_of(source)
        if since is not None:
            night = night_of(source.report.started_at)
            if night < since:
                continue
            done.nights += [
                NightValue(f.identity(), f.gpus, case, name, night, value, f.started_at)
                for f in facts
                for case, name, value in f.measures
            ]
        newest = match is not None and not source.anonymized and safe_component(source.host) == match["host"]
        if not done.facts or not newest or since is None:
            done.facts += facts
        if newest and since is None:
            done.not_read += len(group) - index - 1
            break
    return done


def _night_of(stamp: str) -> dt.date:
    return dt.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").date()


#: Fewer groups than this are read in this process: starting readers costs more than it saves.
PARALLEL_FROM = 64


def read_reports(
    groups: list[list[Path]],
    unreadable: list[Unreadable],
    since: dt.date | None = None,
    named: frozenset[str] = frozenset(),
) -> tuple[list[NodeFacts], list[NightValue], int]:
    """Every group read (`read_group`), in reader processes over the cores for many; the facts in the groups'
    order. Each file that cannot be used is one entry of `unreadable`; `named`, the files given on the command
    line, are read wherever they lead."""
    workers = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1, 16)
    facts: list[NodeFacts] = []
    nights: list[NightValue] = []
    not_read = 0
    if len(groups) < PARALLEL_FROM or workers < 2:
        done: Iterable[GroupRead] = (read_group(group, since, named) for group in groups)
        return _collect(done, facts, nights, unreadable)
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    )
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        done = pool.map(read_group, groups, itertools.repeat(since), itertools.repeat(named), chunksize=32)
        facts, nights, not_read = _collect(done, facts, nights, unreadable)
    return facts, nights, not_read


def _collect(
    done: Iterable[GroupRead], facts: list[NodeFacts], nights: list[NightValue], unreadable: list[Unreadable]
) -> tuple[list[NodeFacts], list[NightValue], int]:
    not_read = 0
    for group in done:
        facts += group.facts
        nights += group.nights
        unreadable += group.unreadable
        not_read += group.not_read
    return facts, nights, not_read


def _times_problem(source: Source) -> str | None:
    """The schema names the times' format but does not hold a report to it: a time that does not parse is one line."""
    try:
        source.when()
    except (TypeError, ValueError, AttributeError, OverflowError):
        report = source.report
        return f"started_at {report.started_at!r:.60} or finished_at {report.finished_at!r:.60} is not a time"
    return None
