"""`ds-doctor triage`: a log, a traceback, stdin or a ds-doctor report against the known issues and the NCCL
watchdog's lines; a directory of Flight Recorder dumps through torch's analyzer.

The notes and problems said about the input name what the input's author chose (a zip member's name, a dump file's
name): every output shows them as the CLI echoes a value (`printable`: secrets masked, escapes shown, one line),
the JSON included, which a script may print.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from ds_doctor.options import WORLD_SIZE
from ds_doctor.redact import printable


@click.command()
@click.argument("source", metavar="FILE|DIR|-", type=click.Path(allow_dash=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print what was found as JSON.")
@click.option(
    "--markdown", "as_markdown", is_flag=True, help="Print what was found as Markdown, for a ticket."
)
@click.option(
    "--world-size",
    type=WORLD_SIZE,
    default=None,
    help="Ranks the job had, to name the ranks a watchdog log never mentions.",
)
def triage(source: str, as_json: bool, as_markdown: bool, world_size: int | None) -> int:
    """Read a log or traceback (a file, or - for stdin) against the known issues and the NCCL watchdog's lines,
    or a directory of Flight Recorder dumps (TORCH_NCCL_DUMP_ON_TIMEOUT output) through torch's analyzer.

    Exit code 0 when something was found, 1 when nothing was.
    """
    if as_json and as_markdown:
        raise click.UsageError("--json and --markdown are two outputs: give one")
    if source != "-" and Path(source).is_dir():
        return triage_dumps(Path(source), as_json)
    from ds_doctor.hardware.env import nccl_version, package_versions
    from ds_doctor.knowledge.triage import read_log, read_report, read_source
    from ds_doctor.reports.triage import (
        render_findings,
        render_triage,
        render_triage_markdown,
        render_versions,
    )

    log = read_source(source)  # bounded: the tail of a big or endless input, a compressed log decompressed
    for note in log.notes:
        click.echo(f"ds-doctor: note: {printable(note)}", err=True)
    name = "stdin" if source == "-" else source
    installed = {**package_versions(), "nccl": nccl_version()}  # NCCL: the wheel's, where the log names none
    reading = read_report(log.text, name) or read_log(log.text, installed, world_size, log.notes)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "matches": [m.to_dict() for m in reading.matches],
                    "notes": [printable(note) for note in reading.notes],
                    "versions": {p: dataclasses.asdict(v) for p, v in reading.versions.items()},
                    "watchdog": dataclasses.asdict(reading.watchdog) if reading.watchdog else None,
                    "findings": [f.to_dict() for f in reading.findings],
                },
                indent=2,
            )
        )
    elif as_markdown:
        click.echo(render_triage_markdown(reading.matches, reading.findings), nl=False)
    else:
        parts = [
            render_triage(reading.matches),
            render_findings(reading.findings),
            render_versions(
                {
                    p: reading.versions[p]
                    for p in {m.package for m in reading.matches}
                    if p in reading.versions
                }
            ),
        ]
        click.echo("\n\n".join(part for part in parts if part))
    return 0 if reading.matches or reading.findings else 1


def triage_dumps(directory: Path, as_json: bool) -> int:
    from ds_doctor.forensics.evidence import judge
    from ds_doctor.forensics.flight import load_dir, positions
    from ds_doctor.reports.triage import render_findings, render_positions

    dumps, problems = load_dir(directory)
    if not dumps:
        raise click.BadParameter(
            f"{directory}: no Flight Recorder dump in it (files named <prefix><rank>)"
            + (f"; {problems[0]}" if problems else ""),
            param_hint="DIR",
        )
    where = {rank: positions(dump) for rank, dump in sorted(dumps.items())}
    findings, trouble = judge(dumps, {})
    problems = [printable(problem) for problem in [*problems, *([trouble] if trouble else [])]]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "flight_recorder": {
                        "ranks": sorted(dumps),
                        "positions": {r: [dataclasses.asdict(p) for p in ps] for r, ps in where.items()},
                        "findings": [f.to_dict() for f in findings],
                        "problems": problems,
                    }
                },
                indent=2,
            )
        )
    else:
        head = f"Flight Recorder dumps of rank(s) {', '.join(map(str, sorted(dumps)))} in {directory}"
        parts = [
            head,
            render_positions(where),
            render_findings(findings)
            or "torch's analyzer found no collective the ranks disagree on or a rank did not join",
            *problems,
        ]
        click.echo("\n\n".join(part for part in parts if part))
    return 0 if findings else 1
