"""S4: optimizer tensors after a real Accelerate save_state/load_state, with `meta` as the second device."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from ds_doctor.checks.placement import optimizer_state_colocation
from ds_doctor.collect.devicemap import Recorder, collect
from ds_doctor.probes.optimizer_state_placement import make_optimizer, placement
from ds_doctor.probes.shared.common import accelerate_session
from ds_doctor.probes.shared.models import batch, build_mlp

needs_ppsf = pytest.mark.skipif(
    importlib.util.find_spec("prodigyplus") is None or importlib.util.find_spec("accelerate") is None,
    reason="pip install prodigy-plus-schedule-free accelerate",
)


def _train_and_save(name: str, directory: Path) -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(device_placement=False)
    model = build_mlp()
    model, optimizer = accelerator.prepare(model, make_optimizer(name, model.parameters()))
    x, y = batch(4, dtype=torch.float32, device="cpu", seed=0)
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
    accelerator.save_state(str(directory))


def _resume_on_meta(name: str, directory: Path) -> tuple[Any, Any]:
    from accelerate import Accelerator

    accelerator = Accelerator(device_placement=False)
    model = build_mlp().to("meta")  # parameters on the second device before the optimizer is made
    model, optimizer = accelerator.prepare(model, make_optimizer(name, model.parameters()))
    accelerator.load_state(str(directory))
    return model, optimizer


@needs_ppsf
def test_load_state_leaves_exactly_the_two_group_tensors_behind(tmp_path: Path) -> None:
    with accelerate_session():
        _train_and_save("prodigy-plus-schedule-free", tmp_path / "state")
        model, optimizer = _resume_on_meta("prodigy-plus-schedule-free", tmp_path / "state")
        records = collect(Recorder(0, "after_load"), module=model, optimizer=optimizer)
    state = [r for r in records if r.role == "optim_state"]
    # per-parameter state followed the parameters
    assert state and {r.device for r in state if r.shape} == {"meta"}
    findings = optimizer_state_colocation(records)
    assert len(findings) == 1
    flagged = sorted(r.path for r in findings[0].evidence if r.role == "optim_group_tensor")
    assert flagged == [
        "optimizer.param_groups[0].running_d_denom",
        "optimizer.param_groups[0].running_d_numerator",
    ]
    assert {r.device for r in findings[0].evidence if r.role == "optim_group_tensor"} == {"cpu"}
    assert all(f.remedy and "map_location" in f.remedy for f in placement(records, "warning"))


def test_adamw_round_trip_on_meta_flags_nothing(tmp_path: Path) -> None:
    """torch casts per-parameter state to the parameter's device; AdamW's 0-dim `step` stays on CPU on purpose."""
    pytest.importorskip("accelerate")
    with accelerate_session():
        _train_and_save("adamw", tmp_path / "state")
        model, optimizer = _resume_on_meta("adamw", tmp_path / "state")
        records = collect(Recorder(0, "after_load"), module=model, optimizer=optimizer)
    steps = [r for r in records if r.path.endswith(".step")]
    assert steps and {r.device for r in steps} == {"cpu"} and {r.shape for r in steps} == {()}
    assert optimizer_state_colocation(records) == []


def test_a_group_tensor_is_not_excused_as_a_cpu_scalar() -> None:
    """0-dim CPU per-parameter state is exempt (AdamW's step); a 0-dim CPU tensor in a param group is not."""
    param = torch.nn.Parameter(torch.zeros(3, device="meta"))
    optimizer = torch.optim.SGD([param], lr=0.1)
    optimizer.param_groups[0]["running_d_denom"] = torch.tensor(0.0)
    optimizer.state[param]["step"] = torch.tensor(1.0)
    records = collect(Recorder(0, "s"), module=None, optimizer=optimizer)
    anchor = Recorder(0, "s")
    # the name the collector gave it
    anchor.add(param, role="param", path="optimizer.param_groups[0].params[0]")
    findings = optimizer_state_colocation(records + anchor.records)
    assert [sorted(r.path for r in f.evidence if r.role != "param") for f in findings] == [
        ["optimizer.param_groups[0].running_d_denom"]
    ]
