"""The watch's moments on one process: metadata only, the same findings as the full invariants, what close()
puts back, the log lines and the report file."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ds_doctor.api import DoctorError, watch
from ds_doctor.checks.identity import no_meta_params
from ds_doctor.checks.placement import ZeroPromise, optimizer_state_colocation, param_partition_placement
from ds_doctor.checks.structure import buffer_placement
from ds_doctor.collect.devicemap import Recorder, collect, collect_rows, named_tensors
from ds_doctor.probes.zero_offload import ZeroCase
from ds_doctor.reports.model import Outcome, Report, Verdict
from ds_doctor.watch import fast, moments
from ds_doctor.watch.target import Target, name_map_of
from ds_doctor.watch.watcher import Watch
from tests.conftest import build_engine, requires_deepspeed, train_one_step
from tests.resources.user_models import TiedWithBuffers


class Dispatched(TorchDispatchMode):
    """Every aten op that reaches dispatch (a copy, a sync, a comparison of tensors) while it is on."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


M = TypeVar("M", bound=torch.nn.Module)


def trained(model: M) -> tuple[M, torch.optim.Optimizer]:
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model(torch.randint(0, 32, (2, 5))).float().sum().backward()
    optimizer.step()
    optimizer.param_groups[0]["running_d"] = torch.zeros(())  # a tensor kept in the group, as Prodigy does
    return model, optimizer


def target_of(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Target:
    return Target(
        kind="test", module=model, optimizer=optimizer, device="cpu", own_name_map=name_map_of(model)
    )


def test_every_moment_is_metadata_only() -> None:
    """No aten op is dispatched by a moment's checks, healthy or with findings to report."""
    model, optimizer = trained(TiedWithBuffers())
    target = target_of(model, optimizer)
    ties = moments.tied_records(target, 0, "after_prepare")
    # findings: an orphan, a stale name
    model.block.weight = torch.nn.Parameter(model.block.weight.detach().clone())
    with Dispatched() as seen:
        checks = [
            moments.after_prepare(target, 0),
            moments.step(target, 0, "step 1", [], []),
            moments.before_save(target, 0, "before_save"),
            moments.after_load(target, 0, "after_load", ties),
        ]
    assert seen.ops == []
    assert any(check.findings for check in checks)  # the planted replacement was seen without a single op
    watcher = Watch(target, out=None)
    with Dispatched() as seen:
        watcher.moment("before_save", "before_save", lambda: moments.before_save(target, 0, "before_save"))
    assert seen.ops == []


def test_the_row_checks_find_what_the_full_invariants_find() -> None:
    """fast.* judge offenders only; on planted cross-device cases (meta as the second device) they match the
    invariants run on every record."""
    model, optimizer = trained(TiedWithBuffers())
    torch.utils.swap_tensors(model.block.bias, torch.nn.Parameter(torch.empty(8, device="meta")))
    model.register_buffer("mask", torch.empty(4, device="meta"))
    rec = Recorder(1, "after_load")
    collect(rec, module=model, optimizer=optimizer)
    records = rec.records
    assert fast.colocation(rec) == optimizer_state_colocation(records) != []
    assert fast.meta_params(rec) == no_meta_params(records) != []
    assert fast.buffers_off(rec, "cpu") == buffer_placement(records, "cpu", "after_load") != []
    healthy, opt = trained(TiedWithBuffers())
    clean = Recorder(0, "x")
    collect(clean, module=healthy, optimizer=opt)
    assert fast.colocation(clean) == fast.meta_params(clean) == fast.buffers_off(clean, "cpu") == []


def step_as_before(target: Target, label: str = "step 2") -> moments.Check:
    """The step moment, held to the placement invariants on every record of a collection of the same tensors."""
    check = moments.step(target, 0, label, [], [])
    rec = Recorder(0, label)
    collect_rows(rec, module=target.module, optimizer=target.optimizer)
    expected = optimizer_state_colocation(rec.records)
    if target.config:
        expected += param_partition_placement(
            rec.records, ZeroPromise.from_config(target.config, target.device)
        )
    assert check.findings == expected and check.records == len(rec)
    return check


def test_a_healthy_step_makes_no_row_and_anything_else_is_judged_on_rows() -> None:
    """The step moment reads the module and the optimizer once and compares devices as it reads (`fast.scan`): on a
    healthy job no name, row or record is made, and it counts what a collection holds. A tensor away from its
    parameter, a parameter that moved or was replaced between steps, a ZeRO-3 partition: each is judged on rows,
    and every step's findings are those of the invariants on every record."""
    model, optimizer = trained(TiedWithBuffers())  # a tied head, buffers, a 0-dim tensor kept in the group
    optimizer.state[model.block.bias]["history"] = [torch.zeros(2), {"at": torch.zeros(())}]
    target = target_of(model, optimizer)
    with Dispatched() as seen:
        counted = fast.scan(model, optimizer)
        healthy = step_as_before(target, "step 1")
    assert seen.ops == [] and counted is not None and healthy.records == counted and healthy.findings == []
    rec = Recorder(0, "step 1")
    collect_rows(rec, module=model, optimizer=optimizer)
    assert moments.step(target, 0, "step 1", [], [], keep_map=True).device_map == rec.records
    # between steps: the parameter moves (the same object, on meta), then comes back
    weight = model.block.weight
    torch.utils.swap_tensors(weight, torch.nn.Parameter(torch.zeros(8, 8, device="meta")))
    assert fast.scan(model, optimizer) is None and step_as_before(target).findings != []
    torch.utils.swap_tensors(weight, torch.nn.Parameter(torch.zeros(8, 8)))  # back, without its grad
    assert fast.scan(model, optimizer) == counted - 1 and step_as_before(target).findings == []
    # state or a group tensor on another device than the parameter
    for holder, key in ((optimizer.state[weight], "exp_avg"), (optimizer.param_groups[0], "running_d")):
        kept = holder[key]
        holder[key] = torch.zeros(kept.shape, device="meta")
        assert fast.scan(model, optimizer) is None and step_as_before(target).findings != []
        holder[key] = kept
    # replaced by a new object: the optimizer's is an orphan, named by its place (no anchor, no finding)
    model.block.weight = torch.nn.Parameter(torch.zeros(8, 8, device="meta"))
    assert fast.scan(model, optimizer) is None and step_as_before(target).findings == []
    # ZeRO-3 partitions against a config that offloads them
    model, optimizer = trained(TiedWithBuffers())
    for param in model.parameters():
        param.ds_tensor = torch.zeros(2, device="meta")  # type: ignore[attr-defined]
    zero3 = {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    offload = dataclasses.replace(target_of(model, optimizer), config=zero3)
    assert fast.scan(model, optimizer) is None
    assert [f.invariant for f in step_as_before(offload).findings] == ["param_partition_placement"]


def test_one_walk_names_what_torch_names() -> None:
    shared = torch.nn.Linear(3, 3)
    model = torch.nn.ModuleDict({"a": shared, "b": torch.nn.Sequential(shared, TiedWithBuffers())})
    params, buffers = named_tensors(model)
    assert params == list(model.named_parameters(remove_duplicate=False))
    assert buffers == list(model.named_buffers(remove_duplicate=False))
    tied = [r for r in collect(Recorder(0, "x"), module=model) if r.role == "param" and r.aliases]
    assert {r.path: r.aliases for r in tied} == {
        "a.weight": ("b.0.weight",),
        "a.bias": ("b.0.bias",),
        "b.1.embed.weight": ("b.1.head.weight",),
    }


def test_a_moment_logs_each_finding_and_reports_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model, optimizer = trained(TiedWithBuffers())
    target = target_of(model, optimizer)
    watcher = Watch(target, out=tmp_path / "w.json")
    watcher.moment("after_prepare", "after_prepare", lambda: moments.after_prepare(target, 0))
    model.block.weight = torch.nn.Parameter(model.block.weight.detach().clone())
    with caplog.at_level(logging.INFO, logger="ds_doctor"):
        found = watcher.moment(
            "before_save", "before_save step 0", lambda: moments.before_save(target, 0, "b")
        )
    assert [r.name for r in caplog.records] == ["ds_doctor"] * len(found) and len(found) == 3
    assert {r.levelname for r in caplog.records} == {"ERROR", "WARNING"}
    report = Report.from_dict(json.loads((tmp_path / "w.json").read_text()))
    assert [(r.case, r.outcome) for r in report.results] == [
        ("watch[after_prepare]", Outcome.PASS),
        ("watch[before_save step 0]", Outcome.FAIL),
    ]
    assert report.command == ["ds-doctor", "watch", "test"] and report.env.packages
    from ds_doctor.knowledge.triage import read_log, read_report  # `ds-doctor triage` reads the file as well

    reading = read_report((tmp_path / "w.json").read_text())
    assert (
        reading is not None
        and [f.invariant for f in reading.findings if f.is_error] == ["optimizer_params_live"] * 2
    )
    assert all(f.message.startswith("watch[before_save step 0]: ") for f in reading.findings)
    assert read_report("Traceback (most recent call last):") is None and read_log("x", {}).matches == []


def test_options_are_checked_where_they_are_passed() -> None:
    with pytest.raises(ValueError, match="raise_on"):
        Watch.validate(out=None, every=None, raise_on="warning", device_maps=False)
    with pytest.raises(ValueError, match="every"):
        Watch.validate(out=None, every=0, raise_on=None, device_maps=False)
    with pytest.raises(TypeError, match="DoctorCallback"):
        watch(torch.nn.Linear(2, 2), out=None)


@requires_deepspeed
def test_close_puts_the_engines_methods_back(dist_group: None, tmp_path: Path) -> None:
    engine = build_engine(ZeroCase(stage=2, offload="opt", dtype="fp32"))
    own = {name: type(engine).__dict__[name] for name in ("save_checkpoint", "load_checkpoint", "step")}
    with watch(engine, out=tmp_path / "w.json") as w:
        assert all(name in vars(engine) for name in own)  # wrapped on the instance
        train_one_step(engine)  # the first optimizer step is a moment
    assert w.closed and not any(name in vars(engine) for name in own)
    assert all(getattr(engine, name).__func__ is function for name, function in own.items())
    report = Report.from_dict(json.loads((tmp_path / "w.json").read_text()))
    assert [r.case for r in report.results] == ["watch[after_prepare]", "watch[step 1]"]
    assert report.results[1].notes["records_per_rank"][0] > 10


@requires_deepspeed
def test_raise_on_error_stops_a_save_with_nothing_written(dist_group: None, tmp_path: Path) -> None:
    engine = build_engine(ZeroCase(stage=1, offload="none", dtype="fp32"))
    w = watch(engine, out=None, raise_on="error")
    engine.module[0].weight = torch.nn.Parameter(engine.module[0].weight.detach().clone())
    with pytest.raises(DoctorError, match=r"before_save step 0: .*\[param_name_map, rank 0\] 0.weight"):
        engine.save_checkpoint(str(tmp_path / "ckpt"))
    assert not (tmp_path / "ckpt").exists()
    w.close()


def test_a_release_that_moves_its_tensors_back_is_a_warning_not_an_error() -> None:
    """After a load, prodigy-plus-schedule-free >= 1.9.2 leaves its group tensors behind too, then moves them back
    on access; the watch cannot take the step that shows it copes, so it goes by the installed version."""
    pytest.importorskip("prodigyplus")
    from importlib import metadata

    from packaging.version import Version
    from prodigyplus import ProdigyPlusScheduleFree

    model, _ = trained(TiedWithBuffers())
    trainable = [p for p in model.parameters() if p.requires_grad]
    for optimizer in (ProdigyPlusScheduleFree(trainable, lr=1.0), torch.optim.SGD(trainable, lr=0.1)):
        optimizer.param_groups[0]["running"] = torch.zeros(())
        torch.utils.swap_tensors(
            trainable[0], torch.nn.Parameter(torch.empty_like(trainable[0], device="meta"))
        )
        check = moments.after_load(target_of(model, optimizer), 0, "after_load", [])
        [colocation] = [f for f in check.findings if f.invariant == "optimizer_state_colocation"]
        if isinstance(optimizer, torch.optim.SGD):
            assert colocation.is_error
        else:
            assert Version(metadata.version("prodigy-plus-schedule-free")) >= Version("1.9.2")
            assert not colocation.is_error and "moves them back on access" in colocation.message
        torch.utils.swap_tensors(
            trainable[0], torch.nn.Parameter(torch.zeros_like(trainable[0], device="cpu"))
        )


def test_a_watch_says_it_was_on_in_one_line_when_it_closes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clean watch is otherwise silent: rank 0 says, once, how many moments it checked and where the report is."""
    model, optimizer = trained(TiedWithBuffers())
    target = target_of(model, optimizer)
    watcher = Watch(target, out=tmp_path / "w.json")
    watcher.moment("after_prepare", "after_prepare", lambda: moments.after_prepare(target, 0))
    watcher.close()
    watcher.close()  # twice: said once
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ds-doctor watch: 1 moment(s) checked, no finding; report: {tmp_path / 'w.json'}"]


def test_after_prepare_holds_accelerates_process_count_to_the_process_group(dist_group: None) -> None:
    """Under torchrun on CPU an Accelerator built without a backend counts one process per rank: every rank acts as
    the main process. The moment now says so (it passed all six moments before)."""
    import dataclasses

    model, optimizer = trained(TiedWithBuffers())
    agreed = dataclasses.replace(target_of(model, optimizer), num_processes=1)  # the group here has one rank
    assert not [f for f in moments.after_prepare(agreed, 0).findings if f.invariant == "world_size_agreement"]
    alone = dataclasses.replace(agreed, num_processes=2)
    (finding,) = [
        f for f in moments.after_prepare(alone, 0).findings if f.invariant == "world_size_agreement"
    ]
    assert finding.is_error and "accelerator.num_processes = 2, dist world size = 1" in finding.message


def test_the_replica_digest_is_exact_and_names_the_odd_replica_out() -> None:
    """The digest is the integer sum of the bit patterns: one flipped low bit changes it, the order of summation
    does not; of three replicas, the one that differs is named with its parameters."""
    import torch

    from ds_doctor.watch.replicas import digests, drifted

    weight = torch.randn(64, 64)
    flipped = weight.clone()
    flipped.view(torch.int32)[3, 5] ^= 1  # the last bit of one element's mantissa
    cpu = torch.device("cpu")
    a, b = digests([("w", weight)], cpu), digests([("w", flipped)], cpu)
    assert int(a[0]) != int(b[0])
    assert int(digests([("w", weight.flip(0).flip(0))], cpu)[0]) == int(a[0])
    half = digests([("h", weight.to(torch.bfloat16))], cpu)
    assert half.dtype == torch.int64 and half.shape == (1,)
    (finding,) = drifted(["w", "v"], [[1, 7], [2, 7], [1, 7]], "step 100")
    assert finding.rank == 1 and finding.message == (
        "step 100: rank 1's replica differs from the other data-parallel replicas' in 1 parameter(s): w "
        "(bitwise digest after the step)"
    )
    assert drifted(["w"], [[1], [1]], "step 1") == []


def test_a_bad_wait_setting_is_a_warning_and_the_default_never_an_error_in_the_job() -> None:
    """DS_DOCTOR_WATCH_WAIT_S is read where the user's job imports the API: `10s` raised at import (the job died),
    `nan` made a moment wait forever. Each bad value is now a warning and 10 s; a good one is taken."""
    import os
    import subprocess
    import sys

    from ds_doctor.watch.watcher import DEFAULT_WAIT_S, wait_setting

    for bad in ("10s", "nan", "-1", "0", "inf", "1e9", ""):
        assert wait_setting({"DS_DOCTOR_WATCH_WAIT_S": bad}) == DEFAULT_WAIT_S, bad
    assert wait_setting({"DS_DOCTOR_WATCH_WAIT_S": "2.5"}) == 2.5 and wait_setting({}) == DEFAULT_WAIT_S
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ds_doctor.api import watch; from ds_doctor.watch import watcher; "
            "print(watcher.PRESENT_WAIT_S)",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "DS_DOCTOR_WATCH_WAIT_S": "10s"},
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "10.0", proc.stderr[-2000:]
    assert "DS_DOCTOR_WATCH_WAIT_S='10s' is not a number of seconds" in proc.stderr


def test_the_jobs_own_error_is_classified_by_the_matcher_runs_and_triage_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error the job raises through a watched step is kept as an `error` case with the known issue the one matcher
    names (ds_doctor.knowledge.matching), the report written at once, and the closing line says it."""
    model, optimizer = trained(TiedWithBuffers())
    watcher = Watch(target_of(model, optimizer), out=tmp_path / "w.json")
    try:
        torch.zeros(2).sum().backward()  # a loss cut from the graph: torch's own error
    except RuntimeError as exc:
        watcher.job_failed(exc, "step 3")
    report = Report.from_dict(json.loads((tmp_path / "w.json").read_text()))
    (case,) = report.results
    assert case.outcome == Outcome.ERROR and case.case == "watch[step 3: the job's error]"
    assert case.known_issue is not None and case.known_issue.id == "loss_without_grad_fn"
    assert case.known_issue.match == "wording" and "does not require grad" in (case.reason or "")
    watcher.close()
    assert "known issue loss_without_grad_fn" in capsys.readouterr().err


def test_a_jobs_error_of_a_class_names_the_class_with_no_verdict_on_the_stack(tmp_path: Path) -> None:
    """A job's ImportError that no entry of its own cause matches is the import-error class: named with its remedy,
    its verdict unknown (a class says what kind of failure it was, not that the stack has a known bug)."""
    model, optimizer = trained(TiedWithBuffers())
    watcher = Watch(target_of(model, optimizer), out=tmp_path / "w.json")
    try:
        from transformers import AdamW  # noqa: F401  (gone from transformers since 4.52)
    except ImportError as exc:
        watcher.job_failed(exc, "step 1")
    report = Report.from_dict(json.loads((tmp_path / "w.json").read_text()))
    (case,) = report.results
    assert case.known_issue is not None
    assert (case.known_issue.id, case.known_issue.verdict) == ("python_import_mismatch", Verdict.UNKNOWN)
    watcher.close()
