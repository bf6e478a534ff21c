"""The equivalence invariants on constructed sequences: the tolerance formula, which step / stage / parameter a
divergence is named by, what a resume did not restore; and the allowances the probe derives from its fp32 and
float64 references."""

from __future__ import annotations

import math

import pytest

from ds_doctor.checks.equivalence import (
    ULPS_PER_STEP,
    UNIT_ROUNDOFF,
    Gap,
    Tolerance,
    continuation_finding,
    divergence_finding,
    first_divergence,
    largest,
    not_restored,
    samples_finding,
    steps_finding,
    worst_ratio,
)

U = UNIT_ROUNDOFF["float32"]


def step(
    loss: tuple[float, float],
    norm: tuple[float, float] | None = None,
    params: dict[str, tuple[float, float]] | None = None,
) -> list[Gap]:
    """One step's gaps from (route, reference) pairs; a parameter as (error norm, reference norm)."""
    gaps = [Gap("loss", "loss", abs(loss[0] - loss[1]), abs(loss[1]), *loss)]
    if norm is not None:
        gaps.append(Gap("grad_norm", "grad_norm", abs(norm[0] - norm[1]), abs(norm[1]), *norm))
    gaps += [Gap("update", name, error, scale) for name, (error, scale) in (params or {}).items()]
    return gaps


def test_the_tolerance_grows_with_the_steps_from_the_dtype_and_is_zero_where_exact() -> None:
    fp32, bf16 = Tolerance("float32"), Tolerance("bfloat16")
    assert fp32.at(0) == ULPS_PER_STEP * U and fp32.at(3) == 4 * ULPS_PER_STEP * U
    assert bf16.at(0) == ULPS_PER_STEP * 2.0**-8 and bf16.at(0) > 10_000 * fp32.at(0)
    assert Tolerance("float32", exact=True).at(5) == 0.0
    assert "equality" in Tolerance(exact=True).describe() and "per step" in fp32.describe()
    with pytest.raises(ValueError, match="float8"):
        Tolerance("float8")


def test_an_allowance_is_relative_to_the_reference_value_and_ignored_where_exact() -> None:
    gap = Gap("update", "w", error=3e-6, scale=1.0, allowance=2e-6)
    assert gap.allowed(Tolerance(), 0) == pytest.approx(ULPS_PER_STEP * U + 2e-6)
    assert gap.allowed(Tolerance(exact=True), 0) == 0.0
    assert Gap("update", "zero", 0.0, 0.0).relative == 0.0
    assert Gap("update", "zero", 1e-9, 0.0).relative == math.inf  # a value where the reference has none


def test_equal_runs_do_not_diverge_and_a_few_ulps_pass() -> None:
    steps = [
        step((1.0, 1.0), (0.5, 0.5), {"w": (0.0, 2.0)}),
        step((0.9 * (1 + 3 * U), 0.9), (0.4, 0.4), {"w": (2.0 * 5 * U, 2.0)}),
    ]
    assert first_divergence(steps, Tolerance()) is None
    assert 0 < worst_ratio(steps, Tolerance()) < 1


def test_a_loss_averaged_twice_shows_at_the_first_step_loss() -> None:
    """What a user dividing the loss by the world size at 2 ranks gives: half the loss, half the gradients."""
    steps = [
        step((0.6, 1.2), (0.4, 0.8), {"w": (0.0, 2.0)}),
        step((0.55, 1.1), (0.35, 0.7), {"w": (1e-3, 2.0)}),
    ]
    d = first_divergence(steps, Tolerance())
    assert (d.step, d.stage, d.name) == (0, "loss", "loss") and d.relative == pytest.approx(0.5)
    assert (d.route, d.reference) == (0.6, 1.2)
    finding = divergence_finding(
        d,
        2,
        "ddp at 2 rank(s): gradient_accumulation_steps=2",
        first_update=first_divergence(steps, Tolerance(), ("update",)),
    )
    assert finding.invariant == "equivalence" and finding.is_error and finding.stage == "loss"
    assert finding.message.startswith(
        "step 1 of 2: the loss diverges from the single-process fp32 reference by 0.5"
    )
    assert (
        "(route 0.6, plain torch 1.2)" in finding.message
        and "gradient_accumulation_steps=2" in finding.message
    )
    assert "the first parameter over its tolerance: w after step 2" in finding.message


def test_within_a_step_the_earliest_stage_is_named_and_within_it_the_parameter_furthest_over() -> None:
    steps = [
        step((1.0, 1.0), (0.5, 0.5), {"a": (0.0, 1.0)}),
        step((1.0, 1.0), (0.5, 0.5 * (1 + 1e-3)), {"b": (1e-4, 1.0), "c": (1e-2, 1.0), "d": (1e-5, 1.0)}),
    ]
    d = first_divergence(steps, Tolerance())
    assert (d.step, d.stage) == (1, "grad_norm")  # the norm comes before the update within a step
    u = first_divergence(steps, Tolerance(), ("update",))
    assert (u.step, u.name, u.others) == (1, "c", 2) and u.times == pytest.approx(
        1e-2 / (2 * ULPS_PER_STEP * U)
    )
    message = divergence_finding(u, 2, "fsdp1").message
    assert "the parameter after the optimizer step c" in message and "2 more at this stage over it" in message


def test_exact_routes_fail_on_one_bit() -> None:
    steps = [
        step((1.0, 1.0), (0.5, 0.5), {"w": (0.0, 1.0)}),
        step((1.0, 1.0), (0.5, 0.5), {"w": (1e-12, 1.0)}),
    ]
    assert first_divergence(steps, Tolerance()) is None
    d = first_divergence(steps, Tolerance(exact=True))
    assert (d.step, d.name, d.tolerance) == (1, "w", 0.0) and d.times == math.inf
    assert "bit-for-bit the same computation" in divergence_finding(d, 2, "ddp").message
    assert worst_ratio(steps, Tolerance(exact=True)) == math.inf


def test_largest_reports_each_stage() -> None:
    steps = [step((1.0, 1.0 + 1e-7), (0.5, 0.5), {"w": (2e-7, 1.0)})]
    out = largest(steps, Tolerance())
    assert set(out) == {"loss", "grad_norm", "update"} and out["grad_norm"]["relative"] == 0.0
    assert out["update"]["over_tolerance"] == pytest.approx(2e-7 / (ULPS_PER_STEP * U))


SAVED = {
    "parameters": {"w": "sha256:aa float32[4]"},
    "optimizer state": {"state.0.exp_avg": "sha256:01 float32[4]", "state.0.step": "sha256:02 float32[]"},
    "lr": {"group0": 0.003},
    "scheduler step": {"scheduler": 2},
    "rng": {"torch": "sha256:r1 uint8[5056]"},
}


def test_a_resume_that_restores_everything_has_no_finding() -> None:
    assert (
        not_restored(SAVED, {k: dict(v) for k, v in SAVED.items()}, "Accelerate save_state / load_state")
        == []
    )


def test_a_dropped_scheduler_and_moments_are_named_with_their_values() -> None:
    loaded = {
        **SAVED,
        "optimizer state": {"state.0.exp_avg": "sha256:ff float32[4]"},
        "lr": {"group0": 0.0},
        "scheduler step": {"scheduler": 0},
    }
    findings = not_restored(SAVED, loaded, "DeepSpeed save_checkpoint / load_checkpoint")
    messages = [f.message for f in findings]
    assert [m.split(" not restored")[0] for m in messages] == ["optimizer state", "lr", "scheduler step"]
    assert all(f.invariant == "resume_restores" and f.is_error and f.stage == "after_load" for f in findings)
    assert "2 of 2 differ" in messages[0] and "state.0.exp_avg" in messages[0]
    # a digest is named only
    assert "state.0.step (absent)" not in messages[0] and "state.0.step" in messages[0]
    assert messages[1].endswith("group0 0.003 -> 0") and messages[2].endswith("scheduler 2 -> 0")


def test_an_rng_not_restored_is_named() -> None:
    loaded = {**SAVED, "rng": {"torch": "sha256:r2 uint8[5056]"}}
    (finding,) = not_restored(SAVED, loaded, "the Trainer's checkpoint")
    assert finding.message.startswith("rng not restored by the Trainer's checkpoint: 1 of 1 differ")


def test_a_resumed_run_that_parts_from_the_straight_one_names_the_step() -> None:
    steps = [step((1.0, 1.0), None, {"w": (0.3, 1.0)})]
    (finding,) = continuation_finding(first_divergence(steps, Tolerance()), 2, 4, "DeepSpeed")
    assert finding.invariant == "resume_continues" and finding.message.startswith(
        "step 3 of 4 (the first 1 after resuming at step 2 through DeepSpeed): the parameter after the optimizer step w"
    )
    assert continuation_finding(None, 2, 4, "DeepSpeed") == []


def test_deepspeeds_fp32_betas_give_the_kernel_term() -> None:
    from ds_doctor.probes.equivalence.bounds import fp32, kernel_epsilon

    assert fp32(0.999) == pytest.approx(0.99900001287, abs=1e-11) and fp32(0.5) == 0.5
    assert kernel_epsilon((0.9, 0.999)) == pytest.approx(6.44e-6 + 2.38e-7 + 4 * U, rel=1e-2)
    assert kernel_epsilon((0.5, 0.75)) == 4 * U  # exactly representable betas: no formula difference


def test_allowances_follow_the_float64_reference_and_the_kernel_term() -> None:
    import torch

    from ds_doctor.probes.equivalence.bounds import SHADOW_FACTOR, allowances
    from ds_doctor.probes.equivalence.subject import StepRecord

    initial = {"w": torch.zeros(2)}
    single = [StepRecord(1.0, 0.5, 0.1, {"w": torch.tensor([3.0, 4.0])})]
    double = [StepRecord(1.0 + 1e-7, 0.5, 0.1, {"w": torch.tensor([3.0, 4.0], dtype=torch.float64) + 1e-6})]
    (extra,) = allowances(single, double, 0.01, initial)
    assert extra["loss"] == pytest.approx(SHADOW_FACTOR * 1e-7) and extra["grad_norm"] == 0.0
    # the update's norm is 5
    assert extra["w"] == pytest.approx(SHADOW_FACTOR * math.sqrt(2) * 1e-6 + 0.01 * 5.0)


def test_adams_eps_region_is_allowed_the_move_rounding_gives_it_there() -> None:
    """An element whose gradient is near Adam's eps moves its update by lr eps / (|g| + eps)^2 per unit of
    gradient error (measured: a tiny Qwen2's gate_proj element at |g| = 2 eps moved 1.1e-6 for 1e-10): it is
    allowed that move; an element far above eps next to nothing; without eps (SGD) nothing of the kind."""
    import torch

    from ds_doctor.probes.equivalence.bounds import SPREAD, noise_allowances

    lr, eps = 1e-3, 1e-8
    exact = [
        {
            "near": torch.tensor([2e-8, 1e-3], dtype=torch.float64),
            "far": torch.tensor([1e-3, -1e-3], dtype=torch.float64),
        }
    ]
    f64 = torch.float64
    noisy = [
        {
            "near": torch.tensor([2e-8 + 1e-10, 1e-3 + 1e-10], dtype=f64),
            "far": torch.tensor([1e-3 + 1e-10, -1e-3]),
        }
    ]
    (got,) = noise_allowances(noisy, exact, lambda _s, _n: lr, (0.9, 0.999), eps)
    error = 1e-10  # the measured error per element of "near": the RMS of its two elements' errors
    assert got["near"] == pytest.approx(
        math.hypot(lr * SPREAD * error * eps / (3e-8) ** 2, lr * SPREAD * error * eps / (1e-3 + eps) ** 2),
        rel=1e-3,
    )
    assert got["near"] > 1e-6 > 1e-12 > got["far"]
    assert noise_allowances(noisy, exact, lambda _s, _n: lr, (0.9, 0.999)) == [{}]


def test_a_route_that_takes_another_number_of_steps_fails_on_it() -> None:
    """A window never stepped (transformers PR #40347's resume) leaves the route a step short: a failed invariant
    with both counts; equal counts, none."""
    (finding,) = steps_finding(4, 3, "a setting")
    assert (
        "took 3 optimizer step(s) where plain torch takes 4" in finding.message and finding.stage == "steps"
    )
    assert finding.data == {"reference_steps": 4, "route_steps": 3}
    assert steps_finding(4, 4, "a setting") == []
    # where the route knows why (its DataLoader ran out), that is said instead of "the same micro-batches"
    (short,) = steps_finding(4, 1, "a setting", "the prepared DataLoader ran out at step 2")
    assert short.message == (
        "the route took 1 optimizer step(s) where plain torch takes 4: the prepared DataLoader ran out at step 2 "
        "(a setting)"
    )


def test_an_epoch_that_deals_a_sample_twice_or_never_fails_on_it() -> None:
    """Accelerate PR #2694's symptom (each rank shuffling on its own): the gathered samples of an epoch against the
    dataset; one permutation dealt once passes, whatever its order."""
    assert samples_finding([[3, 0, 2, 1], [1, 2, 3, 0]], 4, "a setting") == []
    (finding,) = samples_finding([[0, 1, 2, 3], [0, 1, 1, 3]], 4, "a setting")
    assert finding.message.startswith(
        "epoch 1: the ranks drew 4 samples of 4: 1 more than once (1), 1 never (2)"
    )
    assert finding.stage == "data" and finding.data == {"epoch": 1, "twice": [1], "never": [2]}


def test_digests_are_bit_exact() -> None:
    import torch

    from ds_doctor.probes.equivalence.subject import digest

    a = torch.tensor([1.0, 2.0])
    assert digest(a) == digest(a.clone()) and digest(a) != digest(a + 1e-7)
    assert digest(a).endswith("float32[2]") and digest(a.to(torch.bfloat16)).endswith("bfloat16[2]")


class _Ctx:
    """What `hyper_from_config` needs of a probe context: a skip that says why."""

    def skip(self, reason: str) -> None:
        raise RuntimeError(reason)


def test_a_deepspeed_config_is_read_as_the_step_the_reference_reproduces() -> None:
    from ds_doctor.probes.equivalence.sessions import hyper_from_config

    written = hyper_from_config(
        _Ctx(),
        {
            "train_micro_batch_size_per_gpu": 2,
            "gradient_accumulation_steps": 4,
            "gradient_clipping": 1.0,
            "bf16": {"enabled": True},
            "optimizer": {"type": "Adam", "params": {"lr": 3e-4, "betas": [0.8, 0.99]}},
        },
    )
    assert (written.accumulation, written.micro_batch, written.clip, written.dtype) == (4, 2, 1.0, "bfloat16")
    # DeepSpeed's "Adam" is AdamW unless adam_w_mode is false
    assert (written.lr, written.betas, written.weight_decay, written.adamw, written.kernel) == (
        3e-4,
        (0.8, 0.99),
        0.0,
        True,
        "deepspeed",
    )
    trainer = hyper_from_config(
        _Ctx(), {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}
    )
    # the Trainer's AdamW; no gradient_clipping: DeepSpeed's own default (1.0 since 0.19.3, PR #8068), not none
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT

    assert (trainer.lr, trainer.adamw, trainer.kernel) == (5e-5, True, "torch")
    assert trainer.clip == GRADIENT_CLIPPING_DEFAULT == 1.0
    with pytest.raises(RuntimeError, match="reproduces Adam and AdamW; the config's optimizer is 'Lamb'"):
        hyper_from_config(_Ctx(), {"optimizer": {"type": "Lamb", "params": {}}})
