"""`ds-doctor bisect PACKAGE --good V --bad V -k CASES`: the first release of PACKAGE where the selected cases change
(ds_doctor.releases.bisect), each release run on an overlay with `run --with`'s machinery, the cases on it alone."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ds_doctor.files import write_atomic
from ds_doctor.options import check_selection, writable_dir
from ds_doctor.probe.rankoptions import DEFAULTS
from ds_doctor.redact import printable
from ds_doctor.releases.bisect import Runner
from ds_doctor.releases.overlay import Release


def overlay_runner(
    level: int, keyword: str, out_dir: Path, find_links: Path | None, ignore_pins: bool
) -> Runner:
    """A release -> each selected case's outcome on an overlay of it (a run folder per release under `out_dir`)."""
    from ds_doctor.releases.overlay import build, installed
    from ds_doctor.releases.pins import build_ignoring_pins
    from ds_doctor.run import pipeline

    def outcomes(release: Release) -> dict[str, str]:
        # the release installed here is the stack as installed: pip has nothing to put into an overlay of it
        overlay = (
            None
            if installed(release.name) == release.version
            else (build_ignoring_pins if ignore_pins else build)(
                (release,), find_links, say=lambda line: click.echo(printable(line), err=True)
            )
        )
        options = pipeline.RunOptions(
            level=level,
            keyword=keyword,
            out_dir=writable_dir(out_dir / f"{release.name}-{release.version}"),
            argv=("ds-doctor", "bisect", release.spec),
            overlays=(overlay,) if overlay is not None else (),
            overlays_only=overlay is not None,
            rank=DEFAULTS,
        )
        report, _ = pipeline.run(options)
        stack = overlay.name if overlay is not None else None
        return {r.case: r.outcome.value for r in report.results if r.stack == stack}

    return outcomes


@click.command()
@click.argument("package")
@click.option("--good", required=True, help="A release where the selected cases behave as they should.")
@click.option("--bad", required=True, help="A release where they do not.")
@click.option("-k", "keyword", required=True, help="The cases, as `run -k` selects them.")
@click.option("--level", type=click.IntRange(1, 3), default=3, show_default=True, help="As `run --level`.")
@click.option(
    "--find-links",
    # checked as the command line is read, before --out is created: a folder that is missing, a file or unreadable
    # is the user's input (one line, exit 2), not an OSError from listing it that names the path as Path spells it
    type=click.Path(path_type=Path, exists=True, file_okay=False, readable=True),
    help="Take the releases only from this folder of wheels/sdists (no index).",
)
@click.option(
    "--ignore-pins", is_flag=True, help="As `run --ignore-pins`: install releases that pin this stack out."
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("ds-doctor-bisect"),
    show_default=True,
    help="The folder for each release's run and the bisection's Markdown and JSON.",
)
def bisect(
    package: str,
    good: str,
    bad: str,
    keyword: str,
    level: int,
    find_links: Path | None,
    ignore_pins: bool,
    out_dir: Path,
) -> int:
    """The first release of PACKAGE, from --good to --bad, where the cases -k selects change their outcomes.

    The releases between the two are tried by binary search, each on an overlay as `run --with PACKAGE==V`
    builds it (cached), the cases run on the overlay alone; a release that does not install or import here is
    skipped and listed. Exit 0 with the answer, 2 when there is nothing to bisect.
    """
    from ds_doctor.releases.bisect import between, releases_in, releases_on_index, render_bisection
    from ds_doctor.releases.bisect import bisect as search

    check_selection(level, keyword, None, None, DEFAULTS)
    out = writable_dir(out_dir)
    versions = releases_in(find_links, package) if find_links is not None else releases_on_index(package)
    candidates = between(versions, good, bad)
    click.echo(
        printable(
            f"bisect {package}: {len(candidates)} release(s) from {good} to {bad}: {', '.join(candidates)}"
        ),
        err=True,
    )
    found = search(
        package,
        keyword,
        candidates,
        overlay_runner(level, keyword, out, find_links, ignore_pins),
        say=lambda line: click.echo(printable(line), err=True),
    )
    write_atomic(out / "bisect.md", render_bisection(found))
    write_atomic(out / "bisect.json", json.dumps(found.to_dict(), indent=2) + "\n")
    click.echo(printable(found.summary()))
    click.echo(f"Markdown: {printable(out / 'bisect.md')}")
    return 0
