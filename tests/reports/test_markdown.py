"""The ticket Markdown: offending rows, remedies, grouped known issues, warnings once, measures, and the size
limit a ticket puts on it."""

from __future__ import annotations

import dataclasses

from ds_doctor.reports.markdown import TICKET_LIMIT, render_markdown
from ds_doctor.reports.model import CaseResult, Finding, Outcome, RankSummary, Severity, TensorRecord, Verdict
from tests.reports.samples import (
    TOKEN,
    a_failed_case,
    a_report,
    a_user_config_case,
    an_equivalence_case,
    case,
    every_outcome,
    issue,
)


def test_secrets_are_gone() -> None:
    assert TOKEN not in render_markdown(a_report([a_failed_case()]))


def test_a_failing_case_shows_the_offending_rows_and_the_remedy() -> None:
    text = render_markdown(a_report([a_failed_case()]), full_report="ds-doctor-node1.json")
    assert "### `zero_offload[z3-opt-bf16-ws2]` — fail" in text
    assert "`optimizer.fp32_partitioned_groups_flat[0]`" in text and "| meta |" in text
    assert "verdict **affected**" in text and "issues/5538" in text
    assert "1 device-map records over 1 case(s)" in text and "`ds-doctor-node1.json`" in text


def test_warnings_are_listed_once_with_their_cases() -> None:
    warning = Finding("grad_accum_dtype", Severity.WARNING, "bf16 accumulates in bf16", 0)
    passed = [
        case(Outcome.PASS, f"z3-{i}", probe="zero_offload", findings=(warning, warning)) for i in range(3)
    ]
    text = render_markdown(a_report(passed))
    assert text.count("bf16 accumulates in bf16") == 1 and "3 case(s)" in text
    assert "Cases that need a look" not in text


def reproduced(index: int, verdict: Verdict = Verdict.AFFECTED) -> CaseResult:
    record = TensorRecord(
        0, "before_save", "param", "emb.weight", "emb.weight", "meta", "float32", (32, 8), 256, 0
    )
    finding = Finding(
        "param_name_map",
        Severity.ERROR,
        f"emb.weight is stale ({index})",
        0,
        "before_save",
        evidence=(record,) * 3,
        remedy="dispatch before initialize",
    )
    return case(
        Outcome.XFAIL if verdict in (Verdict.AFFECTED, Verdict.REPRODUCED) else Outcome.XPASS,
        f"z{index}-set-tensor",
        findings=(finding,) if verdict == Verdict.AFFECTED else (),
        known_issue=issue("ds_frozen_param_not_in_param_names", verdict),
        notes={"showed": [f"save_checkpoint raised ({index})"]},
    )


def test_cases_reproducing_one_known_issue_are_grouped_under_it() -> None:
    text = render_markdown(
        a_report([reproduced(i) for i in range(6)] + [reproduced(9, Verdict.NOT_AFFECTED)])
    )
    assert text.count("### `ds_frozen_param_not_in_param_names` — affected: 6 case(s)") == 1
    assert "not_affected: 1 case(s)" not in text  # absent at these versions: nothing to look at, summarised
    assert all(f"`frozen_param_names[z{i}-set-tensor-ws1]`" in text for i in range(6))
    assert text.count("Evidence from one of them") == 1  # one evidence table for the six
    assert "save_checkpoint raised (5)" in text


def test_a_trap_reproduced_as_designed_is_the_librarys_never_this_stacks() -> None:
    """A healthy run's reproductions: no "affected" line, nothing under "needs a look", one summary at the end."""
    results = [reproduced(i, Verdict.REPRODUCED) for i in range(3)] + [reproduced(9, Verdict.NOT_AFFECTED)]
    built = a_report(results)
    text = render_markdown(built)
    assert built.affecting_issues == [] and "affecting this stack" not in text
    assert "Cases that need a look" not in text
    assert "3 case(s) reproduced a known trap as designed and 1 found one absent at these versions" in text
    assert "| `ds_frozen_param_not_in_param_names` | 3 | 1 |" in text
    assert built.library_traps["reproduced"] == {
        "ds_frozen_param_not_in_param_names": [f"frozen_param_names[z{i}-set-tensor-ws1]" for i in range(3)]
    }


def test_the_summary_hides_an_unknown_issue_of_a_passing_case() -> None:
    unknown = case(Outcome.PASS, "ok", known_issue=issue("ds_jit_ninja_missing", Verdict.UNKNOWN))
    known = case(
        Outcome.PASS,
        "known",
        known_issue=issue("ds_z3_offload_gradnorm_device_mismatch", Verdict.NOT_AFFECTED),
    )
    text = render_markdown(a_report([unknown, known]))
    assert "ds_jit_ninja_missing" not in text
    assert "ds_z3_offload_gradnorm_device_mismatch: not_affected" in text


def test_measures_show_their_units_and_a_dash_with_the_reason_at_one_rank() -> None:
    comm = [
        dataclasses.replace(
            case(Outcome.PASS, "all_reduce", probe="comm"),
            world_size=ws,
            case=f"comm[ar-ws{ws}]",
            measures={"algbw_gbps": 1.0, "busbw_gbps": 0.0 if ws == 1 else 1.5},
            series=({"bytes": 4096, "time_us": 2.0, "algbw_gbps": 1.0, "busbw_gbps": 1.5},),
        )
        for ws in (1, 2)
    ]
    text = render_markdown(a_report(comm))
    assert "| case | algbw (GB/s) | busbw (GB/s) |" in text
    assert (
        "| `comm[ar-ws1]` | — (one rank: no data moves between ranks) | — (one rank: no data moves between ranks) |"
        in text
    )
    assert "| `comm[ar-ws2]` | 1 | 1.5 |" in text
    assert "| `comm[ar-ws2]` | 4096 | 2.0 | 1.0 | 1.5 |" in text
    # a one-node report's rows are per size; a report from before one-rank collectives were untimed shows no
    # bandwidth in a one-rank row (issue 45)
    assert "\nPer size (busbw = algbw × nccl-tests' factor; time averaged over the ranks):\n" in text
    assert "| `comm[ar-ws1]` | 4096 | 2.0 | — | — |" in text


def test_rows_per_pair_of_nodes_say_so() -> None:
    fabric = dataclasses.replace(
        case(Outcome.PASS, "pairs", probe="fabric"),
        world_size=4,
        measures={"busbw_gbps": 1.5},
        series=({"node_a": 0, "node_b": 1, "bytes": 4096, "time_us": 2.0, "busbw_gbps": 1.5},),
    )
    text = render_markdown(a_report([fabric]))
    assert "\nPer size, and per pair of nodes (busbw = algbw × nccl-tests' factor;" in text
    assert "| `fabric[pairs-ws1]` | 0 | 1 | 4096 | 2.0 | 1.5 |" in text


def test_a_huge_run_still_fits_a_ticket() -> None:
    tail = "\n".join(f"line {i} of a long traceback " + "x" * 80 for i in range(400))
    failing = [
        dataclasses.replace(
            a_failed_case(),
            case=f"zero_offload[z3-{i}-ws2]",
            ranks=(RankSummary(0, "error", "train", traceback=tail),),
        )
        for i in range(300)
    ]
    text = render_markdown(a_report(failing + [reproduced(i) for i in range(200)]))
    assert len(text) < TICKET_LIMIT
    assert "did not fit a ticket: see the JSON report" in text and "## Device maps" in text


def test_a_block_cut_to_fit_closes_its_code_block_and_details() -> None:
    """One long traceback line: the case's block is cut inside the code block, which must still be closed (else the
    rest of the ticket renders as code, inside a collapsed <details>)."""
    long = dataclasses.replace(
        a_failed_case(), ranks=(RankSummary(0, "error", "train", traceback="Traceback\n" + "x" * 9000),)
    )
    text = render_markdown(a_report([long]))
    start = text.index("### `zero_offload")
    block = text[start : text.index("\n## ", start)]  # up to the next section
    # balanced: the device map's and the rank's, each closed
    assert block.count("```") == 2 and block.count("<details>") == block.count("</details>") == 2
    assert "_… the rest of `zero_offload[z3-opt-bf16-ws2]` is in the JSON report._" in block
    assert len(block) < 8_200


def test_the_ticket_leads_with_its_verdict() -> None:
    healthy = render_markdown(a_report([case(Outcome.PASS, "ok")]))
    assert (
        healthy.split("\n## Summary")[0]
        .rstrip()
        .endswith("**Verdict: nothing failed**; no known issue's affected range holds these releases.")
    )
    failing = render_markdown(a_report([case(Outcome.ERROR, "a", reason="boom"), case(Outcome.FAIL, "b")]))
    assert "**Verdict: 2 case(s) need a look** (1 error, 1 fail)" in failing.split("## Summary")[0]


def test_identical_failures_are_shown_once_with_their_cases() -> None:
    same = [
        case(Outcome.ERROR, name, reason="module 'deepspeed_shm_comm' has no attribute 'x'") for name in "abc"
    ]
    text = render_markdown(a_report([*same, case(Outcome.ERROR, "d", reason="another")]))
    assert text.count("**Reason:** module") == 1 and text.count("**Reason:** another") == 1
    assert "in 2 more case(s): `frozen_param_names[b-ws1]`, `frozen_param_names[c-ws1]`" in text


def test_ds_doctors_own_frames_are_folded_out_of_a_traceback() -> None:
    from ds_doctor.reports.markdown import fold_own_frames

    traceback = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/opt/venv/lib/python3.11/site-packages/ds_doctor/run/worker.py", line 100, in run_case',
            "    module.run(ctx)",
            '  File "/opt/venv/lib/python3.11/site-packages/ds_doctor/probes/zero_offload.py", line 105, in run',
            "    engine, *_ = deepspeed.initialize(",
            "                 ^^^^^^^^^^^^^^^^^^^^^",  # Python 3.11's carets (and a call over several lines) go too
            '  File "/opt/venv/lib/python3.11/site-packages/deepspeed/__init__.py", line 193, in initialize',
            "    engine = DeepSpeedEngine(args=args, model=model)",
            "RuntimeError: the library's own words",
        ]
    )
    folded = fold_own_frames(traceback).split("\n")
    assert folded == [
        "Traceback (most recent call last):",
        "  [2 frame(s) of ds-doctor's own, folded]",
        '  File "/opt/venv/lib/python3.11/site-packages/deepspeed/__init__.py", line 193, in initialize',
        "    engine = DeepSpeedEngine(args=args, model=model)",
        "RuntimeError: the library's own words",
    ]


def test_a_cases_device_map_is_summarised_by_stage_role_device_and_dtype() -> None:
    """The core artefact, readable in the ticket: grouped rows (ranks together) instead of "attach the JSON"."""
    from ds_doctor.reports.markdown import device_map_summary

    def record(rank: int, stage: str, role: str, device: str, path: str) -> TensorRecord:
        return TensorRecord(rank, stage, role, path, path, device, "float32", (4, 4), 16, 64)

    records = tuple(
        record(rank, stage, role, device, f"w{i}")
        for rank in (0, 1)
        for stage, role, device in (
            ("after_init", "fp32_partition", "cpu"),
            ("after_step", "optim_state", "cuda:0"),
        )
        for i in range(3)
    )
    text = "\n".join(device_map_summary(records))
    assert "Device map: 12 record(s) in 2 group(s)" in text
    assert "| after_init | fp32_partition | cpu | float32 | 6 | 0, 1 | 384 B |" in text
    assert "| after_step | optim_state | cuda:0 | float32 | 6 | 0, 1 | 384 B |" in text
    failing = render_markdown(a_report([case(Outcome.FAIL, "f", device_map=records)]))
    assert "Device map: 12 record(s) in 2 group(s)" in failing


def test_the_ticket_leads_with_the_verdict_then_what_needs_a_look_then_what_ran() -> None:
    """Verdict, the case that needs a look, what ran (the user's model with class and size, the config with the
    values filled for `auto` and what was changed to run it here), then the summary table and the environment."""
    text = render_markdown(a_report([an_equivalence_case(), a_user_config_case()]))
    order = ["**Verdict:", "## Cases that need a look", "## What ran", "## Summary", "## Environment"]
    positions = [text.index(heading) for heading in order]
    assert positions == sorted(positions), list(zip(order, positions, strict=True))
    ran = text[text.index("## What ran") : text.index("## Summary")]
    assert "- model `hf:gpt2 (GPT2LMHeadModel, 0.12 M parameters)`: 1 case(s)" in ran
    assert (
        "- your DeepSpeed config: `/home/me/ds_config_zero3.json` (sha256 `9f2c4e1d7a0b`), in 1 case(s)"
        in ran
    )
    assert "`auto` filled: `train_micro_batch_size_per_gpu` = `4`" in ran
    assert "changed to run here: `zero_optimization.offload_optimizer.device`: nvme -&gt; cpu" in ran
    assert "left for DeepSpeed to fill: `zero_optimization.reduce_bucket_size`" in ran


def test_an_equivalence_case_shows_its_steps_as_a_table() -> None:
    text = render_markdown(a_report([an_equivalence_case()]))
    assert "Steps (relative gap; tolerance: 16 x u(float32) x steps, relative):" in text
    assert (
        "| step | loss route | loss reference | loss gap | grad norm route | grad norm reference | grad norm gap |"
        in text
    )
    assert "| 1 | 3.86186 | 4.84265 | 0.203 | 1.14735 | 1.43874 | 0.203 |" in text
    assert "| 4 | 3.83047 | 4.85193 | 0.211 |" in text


def test_a_report_without_models_or_configs_says_nothing_of_what_ran() -> None:
    assert "## What ran" not in render_markdown(a_report(every_outcome()))


def test_an_absent_environment_value_is_said_in_words_in_the_markdown_and_the_html() -> None:
    """A CPU node has no CUDA, NCCL or driver: the ticket says so, never `None` (read as a value)."""
    from ds_doctor.reports.html import render_html

    report = a_report([case(Outcome.PASS, "ok")])
    env = {**report.to_dict()["env"], "cuda": None, "nccl": None, "driver": None, "cuda_driver": None}
    report = dataclasses.replace(report, env=env)
    markdown, html = render_markdown(report), render_html(report)
    assert "None" not in markdown and ">None<" not in html
    assert "| nccl | no NCCL wheel |" in markdown and "<th>driver</th><td>none found</td>" in html
