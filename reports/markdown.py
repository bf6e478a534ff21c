"""Markdown made to paste into a bug ticket: environment, summary, each failing case with its findings and
evidence, the cases that reproduce one known issue grouped under it, warnings once each, measurements.

It must fit a ticket: GitHub refuses an issue body over 65,536 characters, so the text stays under `TICKET_LIMIT` at
every level. Device maps and every note stay in the JSON report (the file to attach); the Markdown says so. Cases
that do not fit whole are listed with a pointer to the JSON, and a cut never leaves a code block or `<details>` open.

Every string from the report goes through `ds_doctor.reports.safe` (`md_text`, `md_code`, `md_fence`, `md_html`; table
cells through `md_cell`): data never starts a block, closes a fence, breaks a table row or becomes HTML, and a URL,
mention or issue reference in it stays inert (a code span). The catalog's references stay links (`md_url`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ds_doctor.reports.hang import format_stacks
from ds_doctor.reports.measures import MEASURES
from ds_doctor.reports.model import (
    FAILING,
    CaseResult,
    Finding,
    IssueRef,
    Outcome,
    Report,
    TensorRecord,
    Verdict,
)
from ds_doctor.reports.safe import clip, md_cell, md_code, md_fence, md_html, md_text, md_url
from ds_doctor.reports.sections import GpuReading
from ds_doctor.reports.views import QUANTITIES, HangSource, Showed, StepTable, view_of
from ds_doctor.reports.whatran import what_ran

TICKET_LIMIT = 60_000
CASE_LIMIT = 8_000  # one case's block, at most
EVIDENCE_ROWS = 12  # offending records shown per finding
TAIL_LINES = 40  # of a traceback or stderr tail


def _table(headers: list[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A table; a cell is data (made text) unless it is `Md` already."""
    lines = ["| " + " | ".join(md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md_cell(v) for v in row) + " |" for row in rows]
    return lines


RECORD_HEADERS = ["rank", "stage", "role", "path", "owner", "device", "dtype", "shape", "numel"]


def _record_rows(records: Iterable[TensorRecord]) -> list[list[object]]:
    return [
        [r.rank, r.stage, r.role, md_code(r.path), r.owner or "", r.device, r.dtype, list(r.shape), r.numel]
        for r in records
    ]


def evidence_table(records: tuple[TensorRecord, ...]) -> list[str]:
    """The offending records as a table (indented under their finding), at most EVIDENCE_ROWS of them."""
    rows = _record_rows(records[:EVIDENCE_ROWS])
    more = [f"  ... {len(records) - len(rows)} more in the JSON report"] if len(records) > len(rows) else []
    return ["", *["  " + row for row in _table(RECORD_HEADERS, rows)], *more, ""]


#: A device map in a ticket: its records grouped, at most this many rows (a ZeRO-3 offload case's 118 records fit ~24)
DEVICE_MAP_ROWS = 40


def device_map_summary(records: Sequence[TensorRecord]) -> list[str]:
    """A case's device map at a glance: its records grouped by stage, role, device and dtype (ranks together), in
    the order they were recorded, with how many tensors and bytes each group holds."""
    groups: dict[tuple[str, str, str, str], list[TensorRecord]] = {}
    for record in records:
        groups.setdefault((record.stage, record.role, record.device, record.dtype), []).append(record)
    rows = [
        [stage, role, device, dtype, len(held), _ranks(held), _bytes(sum(r.nbytes for r in held))]
        for (stage, role, device, dtype), held in list(groups.items())[:DEVICE_MAP_ROWS]
    ]
    more = (
        [f"... {len(groups) - len(rows)} more group(s) in the JSON report", ""]
        if len(groups) > len(rows)
        else []
    )
    return [
        f"<details><summary>Device map: {len(records)} record(s) in {len(groups)} group(s)</summary>",
        "",
        *_table(["stage", "role", "device", "dtype", "tensors", "ranks", "bytes"], rows),
        "",
        *more,
        "</details>",
        "",
    ]


def _ranks(records: Sequence[TensorRecord]) -> str:
    return ", ".join(str(rank) for rank in sorted({r.rank for r in records}))


def _bytes(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


GPU_HEADERS = [
    "gpu",
    "name",
    "memory used/total",
    "temp",
    "power/limit",
    "PCIe now/max",
    "ECC uncorr. (vol/agg)",
    "remap pending",
    "throttle",
    "processes",
]


def _or_na(value: Any, unit: str = "") -> str:
    return "n/a" if value is None else f"{value}{unit}"


def gpu_row(g: GpuReading) -> list[Any]:
    used, total = g.memory_used_bytes, g.memory_total_bytes
    memory = "n/a" if used is None or total is None else f"{used / 2**30:.1f}/{total / 2**30:.0f} GiB"
    pcie = (
        f"gen{_or_na(g.pcie_gen)} x{_or_na(g.pcie_width)} / "
        f"gen{_or_na(g.pcie_gen_max)} x{_or_na(g.pcie_width_max)}"
    )
    processes = g.processes
    return [
        g.index,
        g.name,
        memory,
        _or_na(g.temperature_c, " C"),
        f"{_or_na(g.power_draw_w)}/{_or_na(g.power_limit_w, ' W')}",
        pcie,
        f"{_or_na(g.ecc_uncorrected_volatile)}/{_or_na(g.ecc_uncorrected_aggregate)}",
        _or_na(g.remapped_rows_pending),
        ", ".join(g.throttle_reasons or ()) or "-",
        "n/a" if processes is None else len(processes),
    ]


def environment_rows(report: Report) -> list[list[object]]:
    """The host and the software in two columns (the Markdown's and the HTML page's environment table)."""
    env, hw = report.env, report.hardware
    said = env.build_words()
    gpu_text = ", ".join(f"{g.name} ({(g.memory_total_bytes or 0) / 2**30:.0f} GiB)" for g in hw.gpus)
    rows: list[list[object]] = [
        ["host", hw.host],
        ["cpus", hw.cpus],
        ["memory", f"{(hw.memory_bytes or 0) / 2**30:.1f} GiB"],
        ["gpus", gpu_text or (f"none ({hw.gpus_reason})" if hw.gpus_reason else "none")],
        ["python", env.python],
        ["platform", env.platform],
        ["cuda (torch build)", said["cuda"]],
        ["nccl", said["nccl"]],
        ["driver", said["driver"]],
        ["CUDA (driver)", said["cuda_driver"]],
    ]
    # an absent value is said in words, never `None` (a ticket's reader takes "None" for a value)
    rows = [[name, "unknown" if value is None else value] for name, value in rows]
    return rows + [[name, version] for name, version in env.packages.items() if version]


def render_environment(report: Report) -> list[str]:
    env, gpus = report.env, report.hardware.gpus
    lines = ["## Environment", "", *_table(["", ""], environment_rows(report)), ""]
    if gpus:
        lines += ["### GPUs (NVML)", "", *_table(GPU_HEADERS, [gpu_row(g) for g in gpus]), ""]
        missing = sorted({f"{field}: {why}" for g in gpus for field, why in g.unavailable.items()})
        if missing:
            lines += [f"Not available from NVML here: {md_text('; '.join(missing))}", ""]
    variables = env.variables
    if variables:
        lines += [
            "<details><summary>Environment variables (allowlisted, redacted)</summary>",
            "",
            *_table(["name", "value"], [[k, md_code(v)] for k, v in variables.items()]),
            "",
            "</details>",
            "",
        ]
    return lines


NODE_PACKAGES = ("torch", "deepspeed", "accelerate", "transformers", "numpy", "nvidia-ml-py")


def render_nodes(report: Report) -> list[str]:
    """A multi-node report: one row per node (host, GPUs, driver, the versions that matter), then each node's GPUs."""
    if not report.nodes:
        return []
    rows = []
    for section in report.nodes:
        env, gpus = section.env, section.hardware.gpus
        rows.append(
            [
                section.node,
                section.host,
                f"{len(gpus)} x {gpus[0].name}" if gpus else "none",
                env.driver,
                env.python,
                *[env.packages.get(name) for name in NODE_PACKAGES],
            ]
        )
    lines = ["## Nodes", "", *_table(["node", "host", "GPUs", "driver", "python", *NODE_PACKAGES], rows), ""]
    gpu_rows = [[section.node, *gpu_row(g)] for section in report.nodes for g in section.hardware.gpus]
    if gpu_rows:
        lines += ["### GPUs of every node (NVML)", "", *_table(["node", *GPU_HEADERS], gpu_rows), ""]
    return lines


def _issue_cell(result: CaseResult) -> str:
    """The known issue in the summary table; a passing case's issue of unknown verdict is noise there."""
    issue = result.known_issue
    if issue is None or (result.outcome == Outcome.PASS and issue.verdict == Verdict.UNKNOWN):
        return ""
    return f"{issue.id}: {issue.verdict.value}"


def render_stopped(report: Report) -> list[str]:
    """A run that stopped before its last case says so before anything else (`RunStop.headline`)."""
    if report.stopped is None:
        return []
    return [
        f"**{md_text(report.stopped.headline)}.** The cases that finished are reported as usual; a case `not run` "
        "says nothing of this stack.",
        "",
    ]


def render_verdict(report: Report) -> list[str]:
    """The first thing a maintainer reads: does anything need a look, and does a known issue concern this stack (of a
    stopped run: of the cases that finished)."""
    failing = [r for r in report.results if r.outcome in FAILING]
    affected = [md_code(i["id"]) for i in report.affecting_issues]
    traps = report.library_trap_counts[0]
    of = f" of the {report.stopped.finished} case(s) that finished" if report.stopped is not None else ""
    if failing:
        kinds = ", ".join(
            f"{sum(r.outcome == o for r in failing)} {o.value}"
            for o in sorted(FAILING, key=str)
            if any(r.outcome == o for r in failing)
        )
        verdict = (
            f"**Verdict{of}: {len(failing)} case(s) need a look** ({kinds}), under Cases that need a look"
        )
    else:
        verdict = f"**Verdict{of}: nothing failed**"
    verdict += (
        f"; this stack is affected by {len(affected)} known issue(s): {', '.join(affected)}"
        if affected
        else "; no known issue's affected range holds these releases"
    )
    if traps:
        verdict += (
            f". {traps} library trap(s) reproduced on purpose are facts about the libraries (at the end)"
        )
    return [verdict + ".", ""]


def render_summary(report: Report) -> list[str]:
    counts = {k: v for k, v in report.summary.items() if v}
    lines = [
        "## Summary",
        "",
        " · ".join(f"**{md_text(Outcome(k).label)}** {v}" for k, v in counts.items()) or "no cases ran",
        "",
    ]
    if report.results:
        where = ["where"] if report.nodes else []
        lines += _table(
            ["case", *where, "outcome", "ranks", "device", "duration", "known issue"],
            [
                [
                    md_code(r.label),
                    *([report.where(r)] if report.nodes else []),
                    r.outcome.label,
                    r.world_size,
                    r.device_kind + (" (shared GPU)" if r.shared_gpu else ""),
                    f"{r.duration_s:.1f} s",
                    _issue_cell(r),
                ]
                for r in report.results
            ],
        )
        lines.append("")
    affecting = report.affecting_issues
    if affecting:
        lines += ["### Known issues affecting this stack", ""]
        lines += [
            f"- **{md_text(i['id'])}** ({md_text(i.get('affected_versions'))}): {md_text(i['remedy'])} — "
            f"{len(i['cases'])} case(s)"
            for i in affecting
        ]
        lines.append("")
    return lines


def _config_lines(title: str, config: Any) -> list[str]:
    lines = [
        f"- {title}: {md_code(config.path)} (sha256 {md_code(config.sha256[:12])}), in {config.cases} case(s)"
    ]
    lines += [f"  - `auto` filled: {md_code(k)} = {md_code(repr(v))}" for k, v in config.filled.items()]
    lines += [f"  - changed to run here: {md_code(k)}: {md_text(v)}" for k, v in config.changed.items()]
    if config.left_to_deepspeed:
        lines += [
            f"  - left for DeepSpeed to fill: {', '.join(md_code(k) for k in config.left_to_deepspeed)}"
        ]
    return lines


def render_what_ran(report: Report) -> list[str]:
    """The models trained (class and size where the user gave one) and the user's configs with the values filled in
    for `auto`: what a maintainer needs to know before reading what went wrong."""
    ran = what_ran(report)
    if not ran:
        return []
    lines = ["## What ran", ""]
    lines += [f"- model {md_code(model)}: {count} case(s)" for model, count in ran.models]
    if ran.deepspeed:
        lines += _config_lines("your DeepSpeed config", ran.deepspeed)
    if ran.accelerate:
        lines += _config_lines("your Accelerate config", ran.accelerate)
    return [*lines, ""]


def render_stacks(report: Report) -> list[str]:
    """`run --with`: the stacks' versions, each case's outcome on each, and the known issues that appear or clear."""
    from ds_doctor.reports.sides import by_case, changes, ignored_pins, stack_names

    names = stack_names(report)
    if not names:
        return []
    packages = sorted({p for s in report.stacks for p in s.packages})
    columns = {"installed": None, **{name: name for name in names}}  # a column's title -> a result's `stack`
    headers = [md_code(c) for c in columns]
    version_of = {s.name: s.packages for s in report.stacks}
    lines = [
        "## Stacks",
        "",
        "The selected cases ran on the stack as installed and again on each overlay "
        "(`--with`), whose releases the ranks import first.",
        "",
        *_table(
            ["package", *headers],
            [
                [md_code(p), *[md_text(version_of.get(c, {}).get(p) or "-") for c in columns]]
                for p in packages
            ],
        ),
        "",
        *[f"- {md_text(line)}" for line in ignored_pins(report)],
        *([""] if ignored_pins(report) else []),
    ]
    rows = [
        [
            md_code(case + (f"@node{node}" if node is not None else "")),
            *[results[stack].outcome.label if stack in results else "-" for stack in columns.values()],
        ]
        for (case, node), results in by_case(report).items()
        if len(results) > 1 or None not in results
    ]
    lines += [*_table(["case", *headers], rows), ""]
    found = changes(report)
    lines += [f"- {md_text(change.line())}" for change in found] or [
        "No known issue appears or clears between the stacks in these cases."
    ]
    return [*lines, ""]


#: Notes a probe writes for the reader of a case that needs a look (the JSON has every note).
#: Where ds-doctor's own frames live: its installed package (`.../ds_doctor/...`), or the source folders of a checkout
_HERE = Path(__file__).resolve().parent.parent
OWN_FRAME = re.compile(
    r'^  File "(?:[^"]*/ds_doctor/|'
    + "|".join(re.escape(str(_HERE / d)) + "/" for d in ("doctor", "probes", "reports"))
    + r')[^"]*", line \d+, in .*$'
)


def fold_own_frames(traceback: str) -> str:
    """A traceback with ds-doctor's own frames folded to one line per run of them: what remains starts in the library
    or the user's code, so a reader does not take ds-doctor for the culprit."""
    out: list[str] = []
    lines, index, folded = traceback.split("\n"), 0, 0
    while index < len(lines):
        if OWN_FRAME.match(lines[index]):
            folded += 1
            index += 1
            while index < len(lines) and lines[index].startswith("    "):  # its source lines and carets
                index += 1
            continue
        if folded:
            out.append(f"  [{folded} frame(s) of ds-doctor's own, folded]")
            folded = 0
        out.append(lines[index])
        index += 1
    if folded:
        out.append(f"  [{folded} frame(s) of ds-doctor's own, folded]")
    return "\n".join(out)


def _tail(text: str) -> str:
    """The last lines of a traceback or stderr (split at newlines only: a lone `\r` is shown, in `md_fence`)."""
    return "\n".join(text.rstrip().split("\n")[-TAIL_LINES:])


def render_finding(finding: Finding) -> list[str]:
    where = (
        md_text(str(finding.stage))
        if finding.rank is None
        else f"rank {finding.rank}, {md_text(str(finding.stage))}"
    )
    lines = [
        f"- **{finding.severity.value}** {md_code(finding.invariant)} ({where}): {md_text(finding.message)}"
    ]
    if finding.expected:
        lines += [f"  expected: {md_text(finding.expected)}"]
    if finding.remedy:
        lines += [f"  remedy: {md_text(finding.remedy)}"]
    if finding.evidence:
        lines += evidence_table(finding.evidence)
    return lines


def known_issue_lines(issue: IssueRef | None) -> list[str]:
    """A case's known issue: the verdict and remedy, how its error matched it, how to confirm a "possibly"."""
    if issue is None:
        return []
    lines = [
        f"**Known issue:** {md_code(issue.id)} — verdict **{issue.verdict.value}** "
        f"({md_text(issue.affected_versions)}). Remedy: {md_text(issue.remedy)}",
        "",
    ]
    if issue.matched_by:
        lines += [f"Matched by {md_text(issue.matched_by)}.", ""]
    if issue.confirm:
        lines += [
            f"Possibly only: nothing in the error confirms it. To confirm: {md_text(issue.confirm)}",
            "",
        ]
    if issue.refs:
        lines += [f"References: {', '.join(md_url(ref) for ref in issue.refs)}", ""]
    return lines


def render_case(result: CaseResult, same: Sequence[str] = ()) -> list[str]:
    """One case that needs a look; `same`: the other cases that ended the same way (shown once, here)."""
    lines = [f"### {md_code(result.label)} — {result.outcome.value}", ""]
    if same:
        shown = ", ".join(md_code(label) for label in same[:20]) + (
            f" and {len(same) - 20} more" if len(same) > 20 else ""
        )
        lines += [
            f"The same {result.outcome.value}, with the same reason, in {len(same)} more case(s): {shown}",
            "",
        ]
    if result.reason:
        lines += [f"**Reason:** {md_text(result.reason)}", ""]
    lines += known_issue_lines(result.known_issue)
    lines += [line for finding in result.findings for line in render_finding(finding)]
    if result.device_map:
        lines += device_map_summary(result.device_map)
    lines += step_table(result)
    showed = _showed(result)
    if showed:
        lines += ["**What went wrong for real:**", "", *[f"- {md_text(item)}" for item in showed], ""]
    for key in result.shown_notes:  # what the probe marked for a reader: the renderer knows no probe's keys
        if key in result.notes:
            lines += [f"**{key.replace('_', ' ').capitalize()}:** {md_text(str(result.notes[key]))}", ""]
    lines += render_hang(result)
    lines += _rank_outputs(result)
    return _capped([*lines, ""], f"the rest of {md_code(result.label)}")


def _showed(result: CaseResult) -> tuple[str, ...]:
    """What a reproduced case saw go wrong for real (`ctx.showed`), none where it says nothing."""
    showed = view_of(result, Showed)
    return showed.items if showed is not None else ()


def _number(value: float) -> str:
    return f"{value:.6g}"


def step_table(result: CaseResult) -> list[str]:
    """A case's steps (`StepTable`) as a small table: each quantity of the route and of the reference, and the
    relative gap between them, step by step (the finding names the first step over the tolerance)."""
    table = view_of(result, StepTable)
    if table is None:
        return []
    tolerance, steps = table.tolerance, table.steps
    quantities = [q for q in QUANTITIES if any(q in step.values for step in steps)]
    headers = ["step"] + [
        f"{q.replace('_', ' ')} {part}" for q in quantities for part in ("route", "reference", "gap")
    ]
    rows = [
        [step.number]
        + [
            cell
            for q in quantities
            for cell in (
                (
                    _number(step.values[q].route),
                    _number(step.values[q].reference),
                    f"{step.values[q].relative:.3g}",
                )
                if q in step.values
                else ("-", "-", "-")
            )
        ]
        for step in steps
    ]
    return ["", f"Steps (relative gap; tolerance: {md_text(tolerance)}):", "", *_table(headers, rows), ""]


def _rank_outputs(result: CaseResult) -> list[str]:
    """Each rank's traceback or stderr tail, folded, ds-doctor's own frames folded out."""
    lines: list[str] = []
    for rank in result.ranks:
        if rank.traceback or rank.stderr_tail:
            lines += [
                f"<details><summary>rank {rank.rank}: {md_html(rank.outcome)} in stage {md_html(repr(rank.stage))}"
                + (f", exit code {rank.exit_code}" if rank.exit_code is not None else "")
                + (f" ({md_html(rank.signal)})" if rank.signal else "")
                + "</summary>",
                "",
                *md_fence(_tail(fold_own_frames(rank.traceback or rank.stderr_tail or ""))),
                "",
                "</details>",
                "",
            ]
    return lines


def render_hang(result: CaseResult) -> list[str]:
    """A hung case: where each rank stood in each process group, and each rank's threads folded."""
    rows = [
        [
            rank.rank,
            p.group,
            p.last_completed,
            f"{p.op} #{p.seq}" if p.op else "—",
            p.sizes or "",
            p.state or "",
        ]
        for rank in result.ranks
        for p in rank.collectives
    ]
    hang_source = view_of(result, HangSource)
    source = hang_source.collectives_from if hang_source is not None else "the collective record"
    lines = (
        [
            "",
            f"**Collectives when it hung** (from {md_text(source)}):",
            "",
            *_table(["rank", "group", "last completed", "waiting in", "sizes", "state"], rows),
            "",
        ]
        if rows
        else []
    )
    for rank in result.ranks:
        if rank.stacks:
            main = rank.stacks[0].innermost
            lines += [
                f"<details><summary>rank {rank.rank}: stacks ({len(rank.stacks)} thread(s)), main thread in "
                f"{md_html(str(main) if main else '?')}</summary>",
                "",
                *md_fence(format_stacks(rank.stacks)),
                "",
                "</details>",
                "",
            ]
        if rank.native_stack:
            lines += [
                f"<details><summary>rank {rank.rank}: native stacks (py-spy)</summary>",
                "",
                *md_fence(_tail(rank.native_stack)),
                "",
                "</details>",
                "",
            ]
    return lines


def _capped(lines: list[str], what: str, limit: int = CASE_LIMIT) -> list[str]:
    """A block cut to `limit` characters at a line boundary, saying where the rest is."""
    return _fit(lines, limit, ["", f"_… {what} is in the JSON report._", ""])


_FENCE = re.compile(r"(`{3,}|~{3,})")


def _fit(lines: list[str], limit: int, note: list[str]) -> list[str]:
    """`lines` whole if they fit `limit` characters; else the most lines that fit with what closes the code
    block and the `<details>` they leave open, then `note`. (Fences and `<details>` here are the report's own:
    data never starts a line with either.)"""
    if _size(lines) <= limit:
        return lines
    fence, details, size = "", 0, _size(note)
    kept: list[str] = []
    for line in lines:
        after_fence, after_details = fence, details
        if fence:
            after_fence = "" if line == fence else fence
        elif _FENCE.fullmatch(line):
            after_fence = line
        elif line.startswith("<details>"):
            after_details += 1
        elif line == "</details>":
            after_details -= 1
        closers = _closers(after_fence, after_details)
        if size + len(line) + 1 + _size(closers) > limit:
            break
        kept.append(line)
        size += len(line) + 1
        fence, details = after_fence, after_details
    return [*kept, *_closers(fence, details), *note]


def _closers(fence: str, details: int) -> list[str]:
    return ([fence] if fence else []) + ["", "</details>"] * details


def _reproduced_key(result: CaseResult) -> tuple[str, str] | None:
    """Cases that reproduce a known issue on purpose, and found it affecting this stack (its version range holds the
    installed release), group under (issue, verdict); a trap reproduced as designed, or absent at these versions,
    is a fact about the library (`render_traps`), nothing for a reader to act on."""
    issue = result.known_issue
    if result.outcome in (Outcome.XFAIL, Outcome.XPASS) and issue and issue.verdict == Verdict.AFFECTED:
        return issue.id, issue.verdict.value
    return None


def render_traps(report: Report) -> list[str]:
    """The reproductions run on purpose, summarised at the end as facts about the libraries (expandable)."""
    traps = report.library_traps
    reproduced, absent = traps["reproduced"], traps["absent"]
    if not reproduced and not absent:
        return []
    count_r, count_a = report.library_trap_counts
    rows = [
        [md_code(issue), len(reproduced.get(issue, ())), len(absent.get(issue, ()))]
        for issue in sorted({*reproduced, *absent})
    ]
    return [
        "## Library traps reproduced on purpose",
        "",
        f"{count_r} case(s) reproduced a known trap as designed and {count_a} found one absent at these versions. "
        "ds-doctor runs these misuses on purpose to show its invariants catch them: they are facts about the "
        "libraries at these versions, not findings about this stack.",
        "",
        "<details><summary>Which traps, and how many cases</summary>",
        "",
        *_table(["known issue", "reproduced as designed", "absent at these versions"], rows),
        "",
        "</details>",
        "",
    ]


def render_reproduced(results: list[CaseResult]) -> list[str]:
    """One block for the cases that reproduce one known issue: the issue, the cases, one evidence table."""
    issue = results[0].known_issue
    assert issue is not None
    lines = [
        f"### {md_code(issue.id)} — {issue.verdict.value}: {len(results)} case(s)",
        "",
        md_text(issue.title),
        "",
        f"Affected: {md_text(issue.affected_versions)}. Remedy: {md_text(issue.remedy)}",
        "",
    ]
    if issue.refs:
        lines += [f"References: {', '.join(md_url(ref) for ref in issue.refs)}", ""]
    rows = [
        [
            md_code(r.label),
            r.outcome.value,
            ", ".join(sorted({f.invariant for f in r.findings if f.is_error})) or "-",
            clip(next(iter(_showed(r)), ""), 200),
        ]
        for r in results
    ]
    lines += [*_table(["case", "outcome", "caught by", "what went wrong for real"], rows), ""]
    example = next((f for r in results for f in r.findings if f.is_error and f.evidence), None)
    if example is not None:
        lines += ["Evidence from one of them:", "", *render_finding(example)]
    return _capped(lines, f"the rest of the {md_code(issue.id)} cases")


def identical_failures(report: Report) -> list[tuple[CaseResult, list[str]]]:
    """The failing cases, those that failed the same way (outcome and reason) once: the first, and the others'
    labels (the ticket and the HTML page show each group once)."""
    alike: dict[tuple[str, str], list[CaseResult]] = {}
    for result in report.results:
        if result.outcome in FAILING:
            alike.setdefault((result.outcome.value, result.reason or ""), []).append(result)
    return [(group[0], [r.label for r in group[1:]]) for group in alike.values()]


def attention_blocks(report: Report) -> list[list[str]]:
    """Failing cases one by one, then the cases that reproduce a known issue grouped under it."""
    blocks = [render_case(first, same) for first, same in identical_failures(report)]
    grouped: dict[tuple[str, str], list[CaseResult]] = {}
    for result in report.results:
        key = _reproduced_key(result)
        if key is not None:
            grouped.setdefault(key, []).append(result)
    return blocks + [render_reproduced(results) for results in grouped.values()]


def render_warnings(report: Report) -> list[str]:
    """Warnings and infos once each, with the cases that showed them (a per-case list would repeat them)."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    for result in report.results:
        for finding in result.findings:
            if not finding.is_error:
                cases = seen.setdefault((finding.severity.value, finding.invariant, finding.message), [])
                if result.case not in cases:
                    cases.append(result.case)
    if not seen:
        return []
    lines = ["## Warnings", ""]
    for (severity, invariant, message), cases in seen.items():
        shown = ", ".join(md_code(c) for c in cases[:10]) + (
            f" and {len(cases) - 10} more" if len(cases) > 10 else ""
        )
        lines.append(
            f"- **{md_text(severity)}** {md_code(invariant)}: {md_text(message)} — {len(cases)} case(s): {shown}"
        )
    return [*lines, ""]


def _measure_header(name: str) -> str:
    measure = MEASURES[name]
    return f"{measure.label} ({measure.unit})" if measure.unit else measure.label


def _measure_cell(result: CaseResult, name: str) -> str:
    # ranks on one GPU cross no interconnect
    if result.shared_gpu or not MEASURES[name].applies(result.world_size):
        return f"— ({'its ranks shared a GPU' if result.shared_gpu else MEASURES[name].why_not})"
    value = result.measures.get(name)
    return "" if value is None else f"{value:.4g}"


def _row_cell(result: CaseResult, row: dict[str, float], name: str) -> object:
    """A cell of a case's rows: a dash where the measure means nothing at its world size (a report from before
    one-rank collectives were untimed holds such rows)."""
    return row.get(name, "") if MEASURES[name].applies(result.world_size) else "—"


def render_measurements(report: Report) -> list[str]:
    """The cases' measures, one table per set of measures (collectives, matmuls, ...), then the rows a case
    measured (per message size, as nccl-tests prints them)."""
    tables: dict[tuple[str, ...], list[CaseResult]] = {}
    for result in report.results:
        names = tuple(name for name in MEASURES if name in result.measures)
        if names:
            tables.setdefault(names, []).append(result)
    if not tables:
        return []
    lines = ["## Measurements", ""]
    for names, results in tables.items():
        lines += [
            *_table(
                ["case", *[_measure_header(n) for n in names]],
                [[md_code(r.label), *[_measure_cell(r, n) for n in names]] for r in results],
            ),
            "",
        ]
    series = [r for r in report.results if r.series]
    if series:
        columns = [name for name in MEASURES if any(name in row for r in series for row in r.series)]
        rows = [
            [md_code(r.label), *[_row_cell(r, row, n) for n in columns]] for r in series for row in r.series
        ]
        # pairs of nodes: the fabric's rows, only across nodes
        per = "Per size, and per pair of nodes" if "node_a" in columns else "Per size"
        lines += [
            f"{per} (busbw = algbw × nccl-tests' factor; time averaged over the ranks):",
            "",
            *_table(["case", *[_measure_header(n) for n in columns]], rows),
            "",
        ]
    return lines


def where_the_rest_is(report: Report, full_report: str | None) -> list[str]:
    records = sum(len(r.device_map) for r in report.results)
    name = md_code(full_report) if full_report else "the JSON report"
    return [
        "## Device maps",
        "",
        f"{records} device-map records over {sum(bool(r.device_map) for r in report.results)} case(s), every "
        f"note and every finding's full evidence are in {name}: attach it to the ticket.",
        "",
    ]


def render_markdown(report: Report, *, full_report: str | None = None, limit: int = TICKET_LIMIT) -> str:
    """The ticket Markdown, under `limit` characters; `full_report` names the JSON file that holds the rest."""
    head = [
        f"# ds-doctor report — {md_text(report.hardware.host)}",
        "",
        *render_stopped(report),
        f"ds-doctor {md_text(report.tool['version'])} · level {report.level} · {md_text(report.started_at)} → "
        f"{md_text(report.finished_at)}",
        "",
        f"Command: {md_code(' '.join(report.command))}",
        "",
        *render_verdict(report),
    ]
    skipped = [r for r in report.results if r.outcome == Outcome.SKIP]
    # the verdict, what needs a look, then what ran and where (the ticket leads with what matters)
    tail = [
        *render_what_ran(report),
        *render_stacks(report),
        *render_summary(report),
        *render_nodes(report),
        *render_environment(report),
        *render_warnings(report),
        *render_measurements(report),
        *render_traps(report),
        *(
            ["## Skipped", "", *[f"- {md_code(r.label)}: {md_text(r.reason)}" for r in skipped], ""]
            if skipped
            else []
        ),
        *where_the_rest_is(report, full_report),
    ]
    blocks = attention_blocks(report)
    budget = limit - _size(head) - _size(tail) - 200
    body: list[str] = ["## Cases that need a look", ""] if blocks else []
    for index, block in enumerate(blocks):
        if _size(body) + _size(block) > budget:
            body += [
                f"_… {len(blocks) - index} more block(s) did not fit a ticket: see the JSON report._",
                "",
            ]
            break
        body += block
    lines = "\n".join(head + body + tail).rstrip().split("\n")
    # a summary of thousands of cases: cut, and say so (under `limit`: `_fit` counts a newline after every line)
    return (
        "\n".join(_fit(lines, limit - 1, ["", "_… cut to fit a ticket: the JSON report has everything._"]))
        + "\n"
    )


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)
