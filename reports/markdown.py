"""Markdown made to paste into a bug ticket: environment, summary, each non-pass case with its
findings and evidence, and device maps folded in <details>."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from doctor.devicemap import TensorRecord
from doctor.outcomes import Outcome
from reports.model import CaseResult, Report

MAX_MAP_ROWS = 400


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: Iterable[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _record_rows(records: Iterable[TensorRecord]) -> list[list[object]]:
    return [[r.rank, r.stage, r.role, f"`{r.path}`", r.owner or "", r.device, r.dtype, list(r.shape), r.numel]
            for r in records]


RECORD_HEADERS = ["rank", "stage", "role", "path", "owner", "device", "dtype", "shape", "numel"]


GPU_HEADERS = ["gpu", "name", "memory used/total", "temp", "power/limit", "PCIe now/max", "ECC uncorr. (vol/agg)",
               "remap pending", "throttle", "processes"]


def _or_na(value: Any, unit: str = "") -> str:
    return "n/a" if value is None else f"{value}{unit}"


def gpu_row(g: dict[str, Any]) -> list[Any]:
    used, total = g.get("memory_used_bytes"), g.get("memory_total_bytes")
    memory = "n/a" if used is None or total is None else f"{used / 2**30:.1f}/{total / 2**30:.0f} GiB"
    pcie = f"gen{_or_na(g.get('pcie_gen'))} x{_or_na(g.get('pcie_width'))} / " \
           f"gen{_or_na(g.get('pcie_gen_max'))} x{_or_na(g.get('pcie_width_max'))}"
    processes = g.get("processes")
    return [g.get("index"), g.get("name"), memory, _or_na(g.get("temperature_c"), " C"),
            f"{_or_na(g.get('power_draw_w'))}/{_or_na(g.get('power_limit_w'), ' W')}", pcie,
            f"{_or_na(g.get('ecc_uncorrected_volatile'))}/{_or_na(g.get('ecc_uncorrected_aggregate'))}",
            _or_na(g.get("remapped_rows_pending")), ", ".join(g.get("throttle_reasons") or []) or "-",
            "n/a" if processes is None else len(processes)]


def render_environment(report: Report) -> list[str]:
    env, hw = report.env, report.hardware
    gpus = hw.get("gpus") or []
    gpu_text = ", ".join(f"{g.get('name')} ({(g.get('memory_total_bytes') or 0) / 2**30:.0f} GiB)" for g in gpus)
    rows = [
        ["host", hw.get("host")], ["cpus", hw.get("cpus")],
        ["memory", f"{(hw.get('memory_bytes') or 0) / 2**30:.1f} GiB"],
        ["gpus", gpu_text or f"none ({hw.get('gpus_reason')})"],
        ["python", env.get("python")], ["platform", env.get("platform")],
        ["cuda (torch build)", env.get("cuda")], ["nccl", env.get("nccl")], ["driver", env.get("driver")],
        ["CUDA (driver)", env.get("cuda_driver")],
    ]
    rows += [[name, version] for name, version in (env.get("packages") or {}).items() if version]
    lines = ["## Environment", "", *_table(["", ""], rows), ""]
    if gpus:
        lines += ["### GPUs (NVML)", "", *_table(GPU_HEADERS, [gpu_row(g) for g in gpus]), ""]
        missing = sorted({f"{field}: {why}" for g in gpus for field, why in (g.get("unavailable") or {}).items()})
        if missing:
            lines += ["Not available from NVML here: " + "; ".join(missing), ""]
    variables = env.get("variables") or {}
    if variables:
        lines += ["<details><summary>Environment variables (allowlisted, redacted)</summary>", "",
                  *_table(["name", "value"], [[k, f"`{v}`"] for k, v in variables.items()]), "", "</details>", ""]
    return lines


def render_summary(report: Report) -> list[str]:
    counts = {k: v for k, v in report.summary.items() if v}
    lines = ["## Summary", "", " · ".join(f"**{k}** {v}" for k, v in counts.items()) or "no cases ran", ""]
    if report.results:
        lines += _table(["case", "outcome", "ranks", "device", "duration", "known issue"], [
            [f"`{r.case}`", r.outcome.value, r.world_size, r.device_kind, f"{r.duration_s:.1f} s",
             f"{r.known_issue['id']}: {r.known_issue['verdict']}" if r.known_issue else ""]
            for r in report.results
        ])
        lines.append("")
    affecting = report.affecting_issues
    if affecting:
        lines += ["### Known issues affecting this stack", ""]
        lines += [f"- **{i['id']}** ({i.get('affected_versions')}): {i['remedy']} — cases: {', '.join(i['cases'])}"
                  for i in affecting]
        lines.append("")
    return lines


#: Notes a probe writes for the reader of a case that needs a look (the JSON has every note).
SHOWN_NOTES = ("route", "ordering", "route_refused", "tracked_before", "tracked_after", "changed_by_step")


def render_case(result: CaseResult) -> list[str]:
    lines = [f"### `{result.case}` — {result.outcome.value}", ""]
    if result.reason:
        lines += [f"**Reason:** {_cell(result.reason)}", ""]
    issue = result.known_issue
    if issue:
        lines += [f"**Known issue:** `{issue['id']}` — verdict **{issue['verdict']}** "
                  f"({issue.get('affected_versions', '')}). Remedy: {issue['remedy']}", ""]
        if issue.get("refs"):
            lines += ["References: " + ", ".join(issue["refs"]), ""]
    for finding in result.findings:
        lines += [f"- **{finding.severity}** `{finding.invariant}` (rank {finding.rank}, {finding.stage}): "
                  f"{_cell(finding.message)}"]
        if finding.expected:
            lines += [f"  expected: {_cell(finding.expected)}"]
        if finding.remedy:
            lines += [f"  remedy: {_cell(finding.remedy)}"]
        if finding.evidence:
            lines += ["", *["  " + row for row in _table(RECORD_HEADERS, _record_rows(finding.evidence))], ""]
    showed = result.notes.get("showed")
    if showed:
        lines += ["**What went wrong for real:**", "", *[f"- {_cell(str(item))}" for item in showed], ""]
    for key in SHOWN_NOTES:
        if key in result.notes:
            lines += [f"**{key.replace('_', ' ').capitalize()}:** {_cell(str(result.notes[key]))}", ""]
    for rank in result.ranks:
        if rank.traceback or rank.stderr_tail:
            lines += [f"<details><summary>rank {rank.rank}: {rank.outcome} in stage {rank.stage!r}"
                      + (f", exit code {rank.exit_code}" if rank.exit_code is not None else "")
                      + (f" ({rank.signal})" if rank.signal else "") + "</summary>", "", "```",
                      (rank.traceback or rank.stderr_tail or "").rstrip(), "```", "", "</details>", ""]
    lines.append("")
    return lines


def render_warnings(report: Report) -> list[str]:
    """Warnings and infos once each, with the cases that showed them (a per-case list would repeat them)."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    for result in report.results:
        for finding in result.findings:
            if finding.severity != "error":
                key = (finding.severity, finding.invariant, finding.message)
                cases = seen.setdefault(key, [])
                if result.case not in cases:
                    cases.append(result.case)
    if not seen:
        return []
    lines = ["## Warnings", ""]
    for (severity, invariant, message), cases in seen.items():
        lines.append(f"- **{severity}** `{invariant}`: {_cell(message)} — {len(cases)} case(s): "
                     + ", ".join(f"`{c}`" for c in cases))
    return [*lines, ""]


def render_measurements(report: Report) -> list[str]:
    """The hardware families' numbers: per collective and size (as nccl-tests prints them), per matmul."""
    comm = [r for r in report.results if isinstance(r.notes.get("sizes"), list)]
    matmul = [r for r in report.results if "relative_error" in r.notes]
    if not comm and not matmul:
        return []
    lines = ["## Measurements", ""]
    if comm:
        rows = [[f"`{r.case}`", row.get("bytes"), row.get("time_us"), row.get("algbw_gbps"), row.get("busbw_gbps")]
                for r in comm for row in r.notes["sizes"] if isinstance(row, dict)]
        lines += ["Collectives (busbw = algbw × nccl-tests' factor; time averaged over the ranks):", "",
                  *_table(["case", "bytes", "time (us)", "algbw (GB/s)", "busbw (GB/s)"], rows), ""]
    if matmul:
        rows = [[f"`{r.case}`", r.notes.get("size"), f"{r.notes.get('relative_error', 0):.3g}", r.notes.get("tolerance"),
                 r.notes.get("tflops"), ", ".join(str(v) for v in r.notes.get("tflops_by_rank") or [])] for r in matmul]
        lines += ["Matmuls against fp64 (TFLOP/s of the slowest rank, then each rank's):", "",
                  *_table(["case", "n", "relative error", "tolerance", "TFLOP/s", "by rank"], rows), ""]
    return lines


def render_device_map(result: CaseResult) -> list[str]:
    if not result.device_map:
        return []
    rows = _record_rows(result.device_map[:MAX_MAP_ROWS])
    more = len(result.device_map) - len(rows)
    return [f"<details><summary>Device map of <code>{result.case}</code> ({len(result.device_map)} records)</summary>",
            "", *_table(RECORD_HEADERS, rows), *(["", f"... {more} more in the JSON report"] if more > 0 else []),
            "", "</details>", ""]


def render_markdown(report: Report) -> str:
    lines = [f"# ds-doctor report — {report.hardware.get('host')}", "",
             f"ds-doctor {report.tool['version']} · level {report.level} · {report.started_at} → {report.finished_at}",
             "", f"Command: `{' '.join(report.command)}`", ""]
    lines += render_summary(report)
    lines += render_environment(report)
    attention = [r for r in report.results
                 if r.outcome not in (Outcome.PASS, Outcome.SKIP) or any(f.severity == "error" for f in r.findings)]
    if attention:
        lines += ["## Cases that need a look", ""]
        for result in attention:
            lines += render_case(result)
    lines += render_warnings(report)
    lines += render_measurements(report)
    skipped = [r for r in report.results if r.outcome == Outcome.SKIP]
    if skipped:
        lines += ["## Skipped", "", *[f"- `{r.case}`: {r.reason}" for r in skipped], ""]
    mapped = [r for r in report.results if r.device_map]
    if mapped:
        lines += ["## Device maps", ""]
        for result in mapped:
            lines += render_device_map(result)
    return "\n".join(lines).rstrip() + "\n"
