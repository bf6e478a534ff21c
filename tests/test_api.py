"""`ds_doctor.api.inspect`, as a user calls it inside a training job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ds_doctor.api import inspect
from ds_doctor.probes.shared.models import build_mlp
from ds_doctor.probes.zero_offload import ZeroCase
from tests.conftest import build_engine, requires_deepspeed, train_one_step


def test_inspect_flags_state_left_behind_and_writes_a_file(tmp_path: Path) -> None:
    model = build_mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 16)).sum().backward()
    optimizer.step()
    assert inspect(model, optimizer).ok
    torch.utils.swap_tensors(model[2].bias, torch.nn.Parameter(torch.empty(4, device="meta")))
    result = inspect(model, optimizer, stage="after_load")
    assert not result.ok and result.findings[0].invariant == "optimizer_state_colocation"
    data = json.loads(result.write(tmp_path / "inspect.json").read_text())
    assert {r["path"] for r in data["findings"][0]["evidence"]} >= {"optimizer.state[2.bias].exp_avg"}


@requires_deepspeed
@pytest.mark.usefixtures("dist_group")
def test_inspect_reads_the_zero_promise_from_the_engine() -> None:
    engine = build_engine(ZeroCase(3, "opt+param", "bf16"))
    try:
        train_one_step(engine)
        result = inspect(engine=engine, stage="after_step")
        assert result.ok and [f.invariant for f in result.findings] == ["grad_accum_dtype"]
        assert {r.device for r in result.records if r.role == "fp32_partition"} == {"cpu"}
        claimed = inspect(
            engine=engine,
            accelerator="cpu",
            config={"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "meta"}}},
        )
        assert "fp32_partition_placement" in [f.invariant for f in claimed.findings]
    finally:
        engine.destroy()
