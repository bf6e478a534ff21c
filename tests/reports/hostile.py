"""Hostile text for the renderers: a corpus of strings that try to break out of where a report puts them, a
sample report with every string field planted with one of them, and the invariants each output kind keeps.

Any string in a report may come from someone else (a rank's error message, a host name, a path, a plugin's
case id), and the outputs go to public tickets, CI logs and terminals."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

from markdown_it import MarkdownIt
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from ds_doctor.reports.diff import KIND_TITLES, Change, Diff
from ds_doctor.reports.hang import CollectivePosition, Frame, ThreadStack
from ds_doctor.reports.model import (
    CaseResult,
    Finding,
    IssueRef,
    Outcome,
    RankSummary,
    Report,
    Severity,
    TensorRecord,
    Verdict,
)
from ds_doctor.reports.triage import TriageMatch, VersionUsed
from tests.reports.samples import a_report, case, every_outcome, issue

CORPUS: dict[str, str] = {
    "backtick_runs": " ".join("`" * n for n in range(3, 21)),
    "fence_break": "```\n# PWNED heading\n```",
    "long_fence_break": "````````````````````\n# PWNED\n<details open>",
    "tilde_fence": "~~~\n# PWNED",
    "lone_backtick": "`",
    "cr_overwrite": "all good\rPWNED: everything failed",
    "crlf": "line one\r\nline two\r\n",
    "csi_clear": "\x1b[2J\x1b[HPWNED",
    "csi_colour": "\x1b[31mPWNED\x1b[0m",
    "osc_title": "\x1b]0;PWNED title\x07",
    "osc_link": "\x1b]8;;http://evil.example/\x1b\\PWNED\x1b]8;;\x1b\\",
    "c1_csi": "\x7f\x80\x85\x9b2JPWNED",
    "rich_markup": "[bold red]PWNED[/bold red] [link=http://evil.example]click[/link] :fire:",
    "rich_backslash": "[bold]x[/] trailing backslash \\",
    "html": "<script>alert('PWNED')</script><img src=x onerror=alert(1)>",
    "details": "</summary></details><details open><summary>PWNED</summary>",
    "heading": "x\n# PWNED heading",
    "setext": "x\n===\nPWNED",
    "lists": "x\n- PWNED\n1. PWNED\n> PWNED",
    "leading_marks": "# pwn ~~~ - + * > 1. | [x]: y",
    "table_break": "a | b\n| PWNED | PWNED |\n|---|---|",
    "pipes": "||| \\| \\\\| \\",
    "links": "[PWNED](javascript:alert(1)) ![PWNED](http://evil.example/t.png) <http://evil.example>",
    "link_definition": "[x]: http://evil.example",
    "entities": "&lt;script&gt; &#x1b; &amp;",
    "xml_illegal": "".join(chr(c) for c in range(0x20) if c not in (9, 10, 13)) + "\ufffe\uffff",
    "cdata": "]]><![CDATA[PWNED]]>",
    "xml_markup": '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "PWNED">]>&e; "quoted" \'single\'',
    "prometheus": 'x"} 1\nds_doctor_pwned{case="b"} 1\n# HELP ds_doctor_pwned x\\',
    "bidi": "\u202eDENWP\u202c \u2066x\u2069 \u202a\u202b\u202d\u2067\u2068",
    "nul": "a\x00b",
    "line_separators": "a\u2028b\u2029c",
    "emoji": "\U0001f525\U0001f4a5 \U0001d54f \U0001f600",
    "surrogates": "bad\udc80byte\udcff",
    "long": "x" * 100_000,
    "long_lines": ("y" * 200 + "\n") * 500,
    "empty": "",
}

#: Pieces that try to start a block, a tag or a row: the sentinel never starts a line outside a code block.
SENTINEL = "PWNED"

#: Markers of a string that sits where a report keeps its own structure (planting leaves them as they are).
_KEEP = frozenset({"severity", "verdict", "started_at", "finished_at", "schema_version"})


def plant(value: Any, text: str, key: str = "", owner: dict[str, Any] | None = None) -> Any:
    """`value` (a report's dict) with `text` put around every string, and into the names of env variables."""
    if isinstance(value, str):
        if key in _KEEP or (key == "outcome" and owner is not None and "probe" in owner):
            return value
        return f"{text}{value}{text}" if len(text) < 1000 else f"{text}{value}"
    if isinstance(value, dict):
        renamed = key == "variables"
        return {(plant(k, text) if renamed else k): plant(v, text, k, value) for k, v in value.items()}
    if isinstance(value, list):
        return [plant(v, text, key, owner) for v in value]
    return value


def sample_results() -> list[CaseResult]:
    """Every outcome, and every part of a case a renderer shows: evidence, stacks, collectives, notes, measures."""
    record = TensorRecord(
        0,
        "before_save",
        "param",
        "emb.weight",
        "Embedding",
        "meta",
        "float32",
        (2,),
        2,
        8,
        aliases=("head.weight",),
    )
    stacks = (
        ThreadStack("MainThread", (Frame("wait_for_me", "train.py", 3), Frame("<frame of torch>")), True),
    )
    hung = case(
        Outcome.TIMEOUT,
        "hung",
        world_size=2,
        reason="timed out after 6 s",
        node=1,
        notes={"forensics": {"collectives_from": "torch Flight Recorder"}, "route": "engine"},
        ranks=(
            RankSummary(
                0,
                "timeout",
                "compute",
                "hung",
                exit_code=-9,
                signal="SIGKILL",
                stacks=stacks,
                collectives=(
                    CollectivePosition("0:default_pg", 1, "all_reduce", 2, "in [[1]] Float", "scheduled"),
                ),
                native_stack="native frames",
            ),
        ),
    )
    warning = Finding("grad_accum_dtype", Severity.WARNING, "bf16 accumulates in bf16", 0, "step")
    error = Finding(
        "param_name_map",
        Severity.ERROR,
        "emb.weight is stale",
        0,
        "before_save",
        "a key",
        (record,),
        "dispatch first",
    )
    return [
        *every_outcome(),
        hung,
        case(
            Outcome.PASS, "warned", findings=(warning,), notes={"ordering": "a, b", "tracked_before": ["a"]}
        ),
        case(
            Outcome.PASS,
            "all_reduce",
            probe="comm",
            world_size=2,
            measures={"busbw_gbps": 1.5, "algbw_gbps": 1.0},
            series=({"bytes": 4096, "busbw_gbps": 1.5},),
        ),
        case(
            Outcome.XFAIL,
            "reproduced",
            findings=(error,),
            notes={"showed": ["save_checkpoint raised"]},
            known_issue=issue(
                "ds_frozen_param_not_in_param_names", Verdict.AFFECTED, refs=("https://x.example/1",)
            ),
        ),
        case(
            Outcome.FAIL,
            "gpu1",
            probe="gpu_health",
            findings=(Finding("remapped_rows_pending", Severity.ERROR, "1"),),
        ),
    ]


GPU = {
    "index": 0,
    "name": "NVIDIA H100",
    "uuid": "GPU-1",
    "memory_total_bytes": 80 << 30,
    "memory_used_bytes": 1 << 30,
    "temperature_c": 40,
    "power_draw_w": 100,
    "power_limit_w": 700,
    "pcie_gen": 5,
    "pcie_width": 16,
    "pcie_gen_max": 5,
    "pcie_width_max": 16,
    "throttle_reasons": ["sw_power_cap"],
    "processes": [{"pid": 1}],
    "unavailable": {"ecc": "not supported"},
}
ENV = {
    "python": "3.11",
    "platform": "Linux",
    "cuda": "12.4",
    "nccl": "2.21.5",
    "driver": "550",
    "cuda_driver": "12.4",
    "packages": {"torch": "2.5.1", "deepspeed": "0.19.8"},
    "variables": {"NCCL_DEBUG": "INFO"},
}


def hostile_report(text: str, *, nodes: bool = True) -> Report:
    data = a_report(sample_results()).to_dict()
    data["env"], data["hardware"] = ENV, {"host": "node1", "cpus": 2, "memory_bytes": 1 << 30, "gpus": [GPU]}
    data["run_dir"] = "/tmp/run"
    if nodes:
        data["nodes"] = [
            {"node": n, "host": f"node{n}", "env": ENV, "hardware": data["hardware"]} for n in (0, 1)
        ]
    return Report.from_dict(plant(data, text))


def hostile_diff(text: str) -> Diff:
    changes = tuple(
        Change(kind, f"{text}subject", f"{text}before", None if i % 2 else text, bool(i % 2), text)
        for i, (kind, _) in enumerate(KIND_TITLES)
    )
    return Diff(baseline=f"{text} @ then", new=text, tolerance_pct=10, changes=changes)


def hostile_triage(text: str) -> dict[str, Any]:
    """The arguments of each triage renderer, every string `text`."""
    ref = IssueRef(text, text, Verdict.AFFECTED, text, text, refs=(text, text), fixed_in=text)
    match = TriageMatch(ref, text, text, VersionUsed(text, text), 0, text, text, (text, text))
    return {
        "matches": [match, match],
        "versions": {f"{text}a": VersionUsed(text, "the log"), "b": VersionUsed(text, text)},
        "findings": [Finding(text, Severity.ERROR, text), Finding(text, Severity.WARNING, text)],
        "positions": {0: [CollectivePosition(text, 1, text, 2, text, text), CollectivePosition(text, 0)]},
    }


# -- the invariants --------------------------------------------------------------------------------------------

#: What no output may carry raw: C0 but \n and \t, DEL, C1, the bidi overrides and isolates, line separators,
#: the XML non-characters and lone surrogates.
RAW_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufffe\uffff\ud800-\udfff]"
)


def raw_controls(text: str) -> list[str]:
    return sorted({repr(ch) for ch in RAW_CONTROL.findall(text)})


MD = MarkdownIt("commonmark", {"html": True}).enable("table")
OWN_HEADING = re.compile(
    r"(ds-doctor (report|diff|triage)\b|`|(Summary|Findings|Nodes|Environment|GPUs \(NVML\)|"
    r"GPUs of every node \(NVML\)|"
    r"Known issues affecting this stack|Cases that need a look|Warnings|Measurements|Skipped|"
    r"Library traps reproduced on purpose|"
    rf"Device maps|{'|'.join(re.escape(title) for _, title in KIND_TITLES)})$)"
)
OWN_TAGS = re.compile(r"</?details>|</?summary>|</?code>")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
#: A line (outside code blocks) that begins with the sentinel, or with a block marker and then the sentinel.
STARTS_A_BLOCK = re.compile(rf"^\s*(?:[#>+*-]+|\d+[.)]|=+|\|)?\s*{SENTINEL}")


def fenced(text: str) -> tuple[list[bool], bool]:
    """For each line, whether it is inside (or opens or closes) a fenced code block, by CommonMark's rules;
    and whether a fence is still open at the end."""
    inside, fence = [], ""
    for line in text.split("\n"):
        match = FENCE.match(line)
        if not fence:
            if match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
                fence = match.group(1)
            inside.append(bool(fence))
        else:
            inside.append(True)
            if (
                match
                and match.group(1)[0] == fence[0]
                and len(match.group(1)) >= len(fence)
                and not match.group(2).strip()
            ):
                fence = ""
    return inside, bool(fence)


def _pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def _token_problems(tokens: list, index: int, lines: list[str]) -> list[str]:
    """What one parsed token shows: a heading, HTML, an image or a table row the report did not write."""
    token, problems = tokens[index], []
    if token.type == "heading_open" and not OWN_HEADING.match(tokens[index + 1].content):
        problems.append(f"a heading the report did not write: {tokens[index + 1].content[:80]!r}")
    if token.type == "html_block" and re.search(r"<[A-Za-z/!?]", OWN_TAGS.sub("", token.content)):
        problems.append(f"HTML from data: {token.content[:120]!r}")
    problems += [
        f"live {child.type}: {child.content[:80]!r}"
        for child in token.children or ()
        if child.type in ("html_inline", "image")
    ]
    if token.type == "table_open" and token.map:
        rows = lines[token.map[0] : token.map[1]]
        if len({_pipes(row) for row in rows}) != 1 or not all(row.lstrip().startswith("|") for row in rows):
            problems.append(f"a table row broke out: {[row[:60] for row in rows]!r}")
    return problems


def markdown_problems(text: str) -> list[str]:
    """What hostile text did to a Markdown document: unbalanced fences, headings, HTML or images the report does
    not write itself, table rows that break out, the sentinel at the start of a line, raw control characters."""
    problems = [f"raw {c}" for c in raw_controls(text)]
    inside, still_open = fenced(text)
    if still_open:
        problems.append("a code fence is never closed")
    lines = text.split("\n")
    for number, (line, code) in enumerate(zip(lines, inside, strict=True)):
        if not code and STARTS_A_BLOCK.match(line):
            problems.append(f"line {number} starts with planted text: {line[:80]!r}")
    tokens = MD.parse(text)
    opened = 0
    for index, token in enumerate(tokens):
        problems += _token_problems(tokens, index, lines)
        if token.type == "html_block":
            opened += token.content.count("<details>") - token.content.count("</details>")
            if opened < 0:
                problems.append("a </details> closes what the report did not open")
    if opened:
        problems.append(f"{opened} <details> left open")
    return problems


def console_output(
    write: Callable[[Console], None], *, terminal: bool, width: int = 120, colours: bool = False
) -> str:
    """What `write` prints on a rich console to a StringIO, as on a terminal or off one. Without colours any ESC
    is from data; with them, rich's own SGR sequences (`ESC[...m`) are taken out."""
    buffer = io.StringIO()
    write(
        Console(
            file=buffer,
            force_terminal=terminal,
            color_system="truecolor" if colours else None,
            width=width,
            soft_wrap=not terminal,
        )
    )
    return re.sub(r"\x1b\[[0-9;]*m", "", buffer.getvalue()) if colours else buffer.getvalue()


def junit_problems(xml: str) -> list[str]:
    try:
        xml.encode("utf-8")
        ET.fromstring(xml)
    except (ET.ParseError, UnicodeEncodeError) as exc:
        return [f"{type(exc).__name__}: {exc}"]
    return [f"raw {c}" for c in raw_controls(xml)]


def prometheus_problems(text: str, cases: int) -> list[str]:
    try:
        text.encode("utf-8")
        families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    except (ValueError, UnicodeEncodeError) as exc:
        return [f"{type(exc).__name__}: {exc}"]
    problems = [f"raw {c}" for c in raw_controls(text)]
    names = [name for samples in families.values() for s in samples for name in (s.name, *s.labels)]
    problems += [f"bad name {n!r}" for n in names if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", n)]
    # fewer where label values cut to one length meet
    # one per case; fewer where label values cut to one length meet
    per_case = len(families.get("ds_doctor_case_outcome", ()))
    if not 0 < per_case <= cases:
        problems.append(f"{per_case} case_outcome samples for {cases} cases")
    problems += [
        f"a metric from data: {name!r}"
        for name in families
        if "pwned" in name or not name.startswith("ds_doctor_")
    ]
    return problems
