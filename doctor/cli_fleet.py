"""`ds-doctor fleet`: many nodes' reports (what `run` and the nightly job write) as one table.

Every file is read as `diff` reads one (`ds_doctor.run.recover.load_report_file`: size-bounded, checked against its
schema, scrubbed); a file it cannot use is one line, listed under "Unreadable reports", and the rest go on. With
nothing readable left it is a usage error (exit 2). In a directory the files `run` writes
(`ds-doctor-<host>-<UTC time>….json`) are found at any depth up to MAX_DEPTH (links to directories not followed),
and of one host's files in one directory only the newest by name is read once it reads well: a nightly STATE_DIR
keeps a month of reports per node, and reading one costs about as long as checking it against the schema.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path

import click

from ds_doctor.checks.baseline import DEFAULT_TOLERANCE_PCT
from ds_doctor.checks.fleet import Source, build_fleet
from ds_doctor.options import TOLERANCE, check_distinct, check_writable_file, one_line, output_in
from ds_doctor.reports.fleet import Unreadable, render_fleet
from ds_doctor.reports.records import finite_json

PATTERN = "ds-doctor-*.json"
FLEET_FILE = "ds-doctor-fleet.md"  # `--out FOLDER` writes the Markdown as this
#: `report_basename`'s names: the host (one safe path component), the start time, `report`'s suffix, a retry's pid.
NAME = re.compile(r"ds-doctor-(?P<host>.+)-(?P<time>\d{8}T\d{6}Z)(?:-report)?(?:-\d+-\d+)?\.json")
PLACEHOLDER = re.compile(r"host-\d+")  # `--anonymize` names every node so: such files name no node
MAX_FILES = 10_000  # reports found
MAX_ENTRIES = 1_000_000  # directory entries looked at (a DIR of / stops here, not after the whole disk)
MAX_DEPTH = 16


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
    unreadable: list[Unreadable] = []
    groups = find_reports(sources, unreadable)
    if not groups and not unreadable:
        raise click.UsageError(f"no ds-doctor report ({PATTERN}) in {', '.join(map(str, sources))}")
    read, not_read = read_reports(groups, unreadable)
    if not read:  # one line, as every usage error: the first file's reason, and how many more there are
        more = f" (and {len(unreadable) - 1} more unreadable file(s))" if len(unreadable) > 1 else ""
        first = unreadable[0]
        raise click.UsageError(f"no readable ds-doctor report: {first.source}: {first.reason}{more}")
    for entry in unreadable:
        click.echo(f"ds-doctor: warning: {one_line(f'{entry.source}: unreadable: {entry.reason}')}", err=True)
    built = build_fleet(read, unreadable, tolerance_pct, not_read)
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


def find_reports(sources: tuple[Path, ...], unreadable: list[Unreadable]) -> list[list[Path]]:
    """The report files to read, grouped: one host's files in one directory (newest first by name), every other
    file alone. A file named on the command line is read whatever its name."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files += _walk(source, unreadable)
        else:
            files.append(source)
    if len(files) > MAX_FILES:
        raise click.UsageError(
            f"{len(files):,} reports: ds-doctor fleet reads at most {MAX_FILES:,} (name fewer)"
        )
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
    ordered = [
        [path for _, path in sorted(group, key=lambda item: (item[0], item[1].name), reverse=True)]
        for _, group in sorted(groups.items())
    ]
    return ordered + alone


def _walk(root: Path, unreadable: list[Unreadable]) -> list[Path]:
    """The files named as `run` names its reports under `root`, without following links to directories."""
    found: list[Path] = []
    entries, stack = 0, [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as listing:
                for entry in listing:
                    entries += 1
                    if entries > MAX_ENTRIES:
                        raise click.UsageError(
                            f"{root}: more than {MAX_ENTRIES:,} entries below it: name the reports' folder"
                        )
                    _take(entry, depth, stack, found, unreadable)
        except OSError as exc:
            unreadable.append(Unreadable(str(folder), f"cannot list it: {exc.strerror or exc}"))
    return sorted(found)


def _take(
    entry: os.DirEntry[str],
    depth: int,
    stack: list[tuple[Path, int]],
    found: list[Path],
    unreadable: list[Unreadable],
) -> None:
    """One directory entry of the walk: a folder to look into (not through a link), a report file, or neither."""
    if entry.is_dir(follow_symlinks=False):
        if depth < MAX_DEPTH:
            stack.append((Path(entry.path), depth + 1))
    elif fnmatch.fnmatchcase(entry.name, PATTERN):
        if entry.is_file():
            found.append(Path(entry.path))
        else:  # a FIFO would block the read, a device never end it
            unreadable.append(Unreadable(entry.path, "not a regular file"))


def read_reports(groups: list[list[Path]], unreadable: list[Unreadable]) -> tuple[list[Source], int]:
    """Each group read newest first until one reads well and is the host its name says; the rest of that group
    is not read (counted). Every file that cannot be used is one entry of `unreadable`."""
    from ds_doctor.files import safe_component
    from ds_doctor.run.recover import InputError, load_report_file

    read, not_read = [], 0
    for group in groups:
        for index, path in enumerate(group):
            try:
                source = Source(str(path), load_report_file(path))
            except InputError as exc:
                unreadable.append(Unreadable(str(path), str(exc).removeprefix(f"{path}: ")))
                continue
            problem = _times_problem(source)
            if problem:
                unreadable.append(Unreadable(str(path), problem))
                continue
            read.append(source)
            match = NAME.fullmatch(path.name)
            if match and not source.anonymized and safe_component(source.host) == match["host"]:
                not_read += len(group) - index - 1
                break
    return read, not_read


def _times_problem(source: Source) -> str | None:
    """The schema names the times' format but does not hold a report to it: a time that does not parse is one line."""
    try:
        source.when()
    except (TypeError, ValueError, AttributeError, OverflowError):
        report = source.report
        return f"started_at {report.started_at!r:.60} or finished_at {report.finished_at!r:.60} is not a time"
    return None
