"""The equivalence family under real torchrun, through the CLI, in one `ds-doctor run` (a launch per world size)
shared by every test: on a real architecture (`--model hf:qwen3`) with an HF-style DeepSpeed config of "auto"
values and gradient accumulation, the healthy routes pass (DDP bit for bit), and the divergences planted by
tests/resources/equivalence_planted.py (registered for this run only) are caught with the right step, stage and
parameter; the resume cases go through all three save/load paths in a new process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import requires_accelerate, requires_deepspeed
from tests.probes.test_user_setup import AUTO_CONFIG
from tests.test_e2e import ds_doctor, read_report

pytestmark = [pytest.mark.multirank, requires_deepspeed, requires_accelerate]

PLANTED = "tests.resources.equivalence_planted"
CASES = (
    "equivalence_planted[ddp-loss-over-world-size-ws1]",
    "equivalence_planted[ddp-loss-over-world-size-ws2]",
    "equivalence_planted[deepspeed-z2-loss-over-world-size-ws2]",
    "equivalence_planted[ddp-averaged-by-hand-ws1]",
    "equivalence_planted[ddp-averaged-by-hand-ws2]",
    "equivalence_planted[fsdp2-averaged-by-hand-ws2]",
    "equivalence_planted[deepspeed-z2-averaged-by-hand-ws2]",
    "equivalence_planted[deepspeed-z3-averaged-by-hand-ws2]",
    "equivalence_planted[ddp-mid-layer-by-hand-ws2]",
    "equivalence_planted[matrix-ddp-ga4-decay-warmup-loss-over-world-size-ws2]",
    "equivalence_planted[matrix-ddp-bf16-ga4-refuses-fp32-ws2]",
    "equivalence_planted[matrix-deepspeed-z2-resume-no-optimizer-ws2]",
    "equivalence_planted[matrix-trainer-ga4-noclip-gpt2-num-items-ws1]",
    "equivalence_planted[fsdp1-torch-clip-ws1]",
    "equivalence_planted[fsdp1-torch-clip-ws2]",
    "equivalence_planted[resume-deepspeed-no-optimizer-ws1]",
    "equivalence_planted[resume-accelerate-scheduler-not-prepared-ws1]",
    "equivalence[ddp-ws2]",
    "equivalence[deepspeed-z3-ws2]",
    "equivalence[deepspeed-user-config-ws2]",
    "equivalence[trainer-ws2]",
    "equivalence[trainer-no-loss-kwargs-ws1]",
    "equivalence[resume-trainer-ws1]",
    "equivalence[trainer-num-items-ws2]",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("equivalence")
    config = folder / "ds_config.json"
    config.write_text(json.dumps(AUTO_CONFIG))  # bf16, ZeRO-3, both offloads, accumulation: all "auto"
    proc = ds_doctor(
        "run",
        "--level",
        "3",
        "--out",
        str(folder / "out"),
        "--model",
        "hf:qwen3",
        "--deepspeed-config",
        str(config),
        "-k",
        " or ".join(CASES),
        extra_env={"DS_DOCTOR_EXTRA_PROBES": PLANTED},
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # the planted cases fail the run
    return {r["case"]: r for r in read_report(folder / "out")["results"]}


def errors(result: dict, invariant: str) -> list[str]:
    return [
        f["message"] for f in result["findings"] if f["invariant"] == invariant and f["severity"] == "error"
    ]


def test_every_selected_case_ran(run: dict[str, dict]) -> None:
    assert sorted(run) == sorted(CASES)
    assert not [case for case, r in run.items() if r["outcome"] in ("error", "timeout", "skip")]


def test_healthy_routes_on_a_real_architecture_and_an_auto_config_pass(run: dict[str, dict]) -> None:
    for case in ("ddp-ws2", "deepspeed-z3-ws2", "deepspeed-user-config-ws2", "trainer-ws2"):
        assert run[f"equivalence[{case}]"]["outcome"] == "pass", run[f"equivalence[{case}]"]["reason"]
        assert run[f"equivalence[{case}]"]["notes"]["model"].startswith("hf:qwen3")
    ddp = run["equivalence[ddp-ws2]"]["notes"]["equivalence"]
    # clipping engaged at every step
    assert ddp["bitwise_equal"] is True and ddp["clipping_engaged_steps"] == 4
    z3 = run["equivalence[deepspeed-z3-ws2]"]["notes"]["equivalence"]
    assert z3["tolerance"].startswith("16 x u(float32)") and 0 < z3["worst_error_over_tolerance"] < 1
    user = run["equivalence[deepspeed-user-config-ws2]"]["notes"]
    assert user["user_config"]["filled"]["gradient_accumulation_steps"] == 4
    assert "gradient_accumulation_steps=4" in user["equivalence"]["setting"]
    assert user["equivalence"]["tolerance"].startswith("16 x u(bfloat16)")  # "auto" bf16: bf16's tolerance


def test_a_loss_averaged_twice_is_caught_at_two_ranks_and_passes_at_one(run: dict[str, dict]) -> None:
    one = run["equivalence_planted[ddp-loss-over-world-size-ws1]"]
    assert one["outcome"] == "pass" and one["notes"]["equivalence"]["bitwise_equal"] is True
    for case in ("ddp-loss-over-world-size-ws2", "deepspeed-z2-loss-over-world-size-ws2"):
        result = run[f"equivalence_planted[{case}]"]
        assert result["outcome"] == "fail" and result["notes"]["model"].startswith(
            "tests.resources.equivalence_models"
        )
        message = errors(result, "equivalence")[0]
        assert message.startswith(
            "step 1 of 4: the loss diverges from the single-process fp32 reference by 0.5 "
        )
        assert (
            "gradient_accumulation_steps=2" in message
            and f"{case.removesuffix('-ws2')} at 2 rank(s)" in message
        )
    assert (
        "zero stage 2"
        in errors(run["equivalence_planted[deepspeed-z2-loss-over-world-size-ws2]"], "equivalence")[0]
    )
    assert (
        run["equivalence_planted[ddp-loss-over-world-size-ws2]"]["known_issue"]["id"]
        == "ddp_loss_averaged_twice"
    )


def test_a_model_that_averages_over_the_process_group_itself_is_caught_on_every_route(
    run: dict[str, dict],
) -> None:
    """The loss divided by dist.get_world_size() inside the user's module: the reference runs in a process of its
    own with no process group, so it sees one rank and the route's halved loss shows at two ranks on every route;
    at one rank the two agree bit for bit."""
    one = run["equivalence_planted[ddp-averaged-by-hand-ws1]"]
    assert one["outcome"] == "pass" and one["notes"]["equivalence"]["bitwise_equal"] is True
    for route in ("ddp", "fsdp2", "deepspeed-z2", "deepspeed-z3"):
        result = run[f"equivalence_planted[{route}-averaged-by-hand-ws2]"]
        assert result["outcome"] == "fail", (route, result["reason"])
        assert errors(result, "equivalence")[0].startswith(
            "step 1 of 4: the loss diverges from the single-process fp32 reference by 0.5 "
        ), route
        step = result["notes"]["equivalence"]["steps"][0]["loss"]
        assert step["route"] == pytest.approx(step["reference"] / 2, rel=1e-5)


def test_the_first_module_whose_output_leaves_the_reference_is_named(run: dict[str, dict]) -> None:
    """At the first diverging step the route's module outputs (micro-batch 0) are held against the reference's:
    a layer dividing by the world size is named; a loss divided by hand leaves every submodule's output alone, and
    its gradients show it from the module next to the loss; a shard-local clip leaves the gradients alone too."""
    mid = run["equivalence_planted[ddp-mid-layer-by-hand-ws2]"]
    assert mid["outcome"] == "fail"
    assert mid["notes"]["divergence_starts"].startswith(
        "step 1: the first module whose forward output leaves the reference's is by_world (0.5 relative"
    )
    assert "divergence_starts" in mid["shown_notes"]
    averaged = run["equivalence_planted[ddp-averaged-by-hand-ws2]"]["notes"]["divergence_starts"]
    assert averaged.startswith("step 1: every submodule's forward output (") and (
        "the first whose output's gradient leaves it, from the loss backwards, is net.2 (0.5 relative)"
        in averaged
    )
    clipped = run["equivalence_planted[fsdp1-torch-clip-ws2]"]["notes"]["divergence_starts"]
    assert (
        "and so is the gradient of each" in clipped and "the difference starts after the backward" in clipped
    )
    assert "divergence_starts" not in run["equivalence[ddp-ws2]"]["notes"]  # nothing diverged: nothing asked


def test_a_first_module_that_leaves_says_its_input_differs() -> None:
    """The module the forward runs first had the reference's parameters at the step's start: where it leaves,
    the note says the input most likely differs (another batch), as a resumed shuffle replaying epoch 0 shows at
    model.embed_tokens; a later module gets no such reading."""
    from ds_doctor.probes.equivalence.where import describe

    first = describe(4, ("model.embed_tokens", 1.07), 12, 3.8e-6, first="model.embed_tokens")
    assert "most likely its input differs (another batch" in first
    later = describe(1, ("by_world", 0.5), 3, 1e-6, first="net.0")
    assert later.endswith("rank 0's micro-batch 0)")


def test_a_shard_local_clip_is_caught_at_the_gradient_norm(run: dict[str, dict]) -> None:
    # one rank: its shard is all of it
    assert run["equivalence_planted[fsdp1-torch-clip-ws1]"]["outcome"] == "pass"
    result = run["equivalence_planted[fsdp1-torch-clip-ws2]"]
    assert result["outcome"] == "fail"
    message = errors(result, "equivalence")[0]
    assert message.startswith("step 1 of 4: the global gradient norm (before clipping) diverges")
    assert "clip 0.05" in message and "the first parameter over its tolerance: model." in message
    assert result["known_issue"]["id"] == "fsdp1_clip_grad_norm_local_shards"
    norm = result["notes"]["equivalence"]["steps"][0]["grad_norm"]
    assert norm["route"] < norm["reference"]  # the norm of this rank's shard, not of the whole gradient


def test_a_resume_that_drops_the_moments_or_the_scheduler_names_what_was_not_restored(
    run: dict[str, dict],
) -> None:
    no_moments = run["equivalence_planted[resume-deepspeed-no-optimizer-ws1]"]
    assert errors(no_moments, "equivalence") == []  # the straight run is right: only the resume is wrong
    restored = errors(no_moments, "resume_restores")
    assert restored[0].startswith(
        "optimizer state not restored by DeepSpeed save_checkpoint / load_checkpoint"
    )
    assert "exp_avg" in restored[0] and "exp_avg_sq" in restored[0]
    assert errors(no_moments, "resume_continues")[0].startswith(
        "step 3 of 4 (the first 1 after resuming at step 2"
    )
    assert no_moments["known_issue"]["id"] == "ds_resume_state_not_restored"
    assert no_moments["known_issue"]["verdict"] == "affected"
    unprepared = run["equivalence_planted[resume-accelerate-scheduler-not-prepared-ws1]"]
    (scheduler,) = errors(unprepared, "resume_restores")
    resume = unprepared["notes"]["resume"]
    saved, loaded = (
        resume["saved"]["scheduler step"]["scheduler"],
        resume["loaded"]["scheduler step"]["scheduler"],
    )
    assert scheduler.startswith("scheduler step not restored by Accelerate save_state / load_state")
    assert scheduler.endswith(f"scheduler {saved} -> {loaded}") and saved > loaded
    assert errors(unprepared, "resume_continues")
    assert unprepared["known_issue"]["id"] == "acc_resume_scheduler_not_registered"


def test_a_healthy_resume_in_a_new_process_restores_everything(run: dict[str, dict]) -> None:
    result = run["equivalence[resume-trainer-ws1]"]
    assert result["outcome"] == "pass", result["reason"]
    resume = result["notes"]["resume"]
    assert resume["saved"] == resume["loaded"] and resume["saved_at_step"] == 2
    assert {"parameters", "optimizer state", "lr", "scheduler step", "rng"} <= set(resume["saved"])
    assert result["notes"]["resume_process_timing"]["process_s"] > 0  # it ran in a process of its own


def test_gradient_accumulation_normalised_per_micro_batch_is_caught(run: dict[str, dict]) -> None:
    result = run["equivalence[trainer-no-loss-kwargs-ws1]"]
    assert result["outcome"] == "xfail"
    assert (
        result["known_issue"]["id"] == "hf_trainer_ga_no_loss_kwargs"
        and result["known_issue"]["verdict"] == "reproduced"  # a forward without **kwargs: on every release
    )
    assert result["notes"]["trainer"]["model_accepts_loss_kwargs"] is False
    assert errors(result, "equivalence")[0].startswith("step 1 of 4: the loss diverges")
    healthy = run["equivalence[trainer-ws2]"]
    assert healthy["notes"]["trainer"]["model_accepts_loss_kwargs"] is True
    assert healthy["known_issue"]["id"] == "hf_trainer_ga_loss_per_microbatch"
    assert healthy["known_issue"]["verdict"] == "not_affected"  # transformers >= 4.46 here


def test_labels_counted_unshifted_are_told_apart_from_per_micro_batch_normalisation(
    run: dict[str, dict],
) -> None:
    """GPT-2 (its config names no loss_type) through the Trainer: where its first step's loss is the reference's times
    predicted/counted label tokens, that is the unshifted count (xfail, on transformers 5.23 here), never taken for
    the per-micro-batch normalisation the other Trainer routes are about; where it is not, the case passes."""
    result = run["equivalence[trainer-num-items-ws2]"]
    assert result["notes"]["model"].startswith("hf:gpt2")  # the route's own model, not the run's --model
    counts = result["notes"]["label_tokens_first_step"]
    assert 0 < counts["predicted"] < counts["counted_unshifted"]
    first = result["notes"]["equivalence"]["steps"][0]["loss"]
    scale = first["route"] / first["reference"]
    issue = result["known_issue"]
    assert issue["id"] == "hf_trainer_num_items_unshifted_overcount"
    if result["outcome"] == "xfail":
        assert (
            abs(scale - counts["predicted"] / counts["counted_unshifted"]) < 1e-4
            and issue["verdict"] == "affected"
        )
    else:
        assert result["outcome"] == "xpass" and abs(scale - 1) < 1e-4 and issue["verdict"] == "not_affected"


def test_a_matrix_setting_names_its_knobs_and_the_smallest_setting_that_still_diverges(
    run: dict[str, dict],
) -> None:
    """The planted module divides its loss by the world size whatever the knobs: each turned knob set back to its
    default still diverges, so the smallest setting is the route's defaults (three reruns, every rank in step)."""
    result = run["equivalence_planted[matrix-ddp-ga4-decay-warmup-loss-over-world-size-ws2]"]
    assert result["outcome"] == "fail", result["reason"]
    (message,) = set(errors(result, "equivalence"))
    assert "the knobs turned: ga4, decay, warmup" in message
    assert "the smallest setting found that still shows it (3 reruns" in message
    assert message.rstrip(")").endswith(": the defaults")


def test_a_shrink_rerun_that_raises_keeps_its_knob_and_says_so(run: dict[str, dict]) -> None:
    """The planted module raises under a process group without autocast: the rerun with precision back at fp32
    raises on both ranks, so bf16 stays turned (and the finding says why), while accumulation goes back: the case
    is still the divergence's `fail`, not an error of the rerun."""
    result = run["equivalence_planted[matrix-ddp-bf16-ga4-refuses-fp32-ws2]"]
    assert result["outcome"] == "fail", result["reason"]
    (message,) = set(errors(result, "equivalence"))
    assert "the smallest setting found that still shows it (2 reruns" in message
    assert (
        ": bf16; kept turned where a rerun could not tell: with precision back it raised RuntimeError: planted"
        in (message)
    )


def test_the_matrix_resume_knob_catches_a_load_that_leaves_state_out(run: dict[str, dict]) -> None:
    """Saved at step 2, loaded into a fresh engine without the optimizer's moments: the first resumed step (3 of 4)
    leaves the uninterrupted reference; the straight steps before it do not."""
    result = run["equivalence_planted[matrix-deepspeed-z2-resume-no-optimizer-ws2]"]
    assert result["outcome"] == "fail", result["reason"]
    (message,) = set(errors(result, "equivalence"))
    assert message.startswith("step 3 of 4:") and "the knobs turned: resume" in message, message
    stages = [s["stage"] for s in result["ranks"][0]["stages"]]
    assert "save at step 2" in stages and "load at step 2, a fresh engine" in stages
    (restored,) = set(errors(result, "resume_restores"))  # what the load left out, by digest
    assert restored.startswith(
        "optimizer state not restored by DeepSpeed save_checkpoint / load_checkpoint, into a"
    )
    assert "state.0.exp_avg" in restored


def test_a_trainer_setting_is_shrunk_and_named(run: dict[str, dict]) -> None:
    """The Trainer's settings shrink too (each rerun a Trainer against its own token-mean reference): GPT-2's
    unshifted count shows at every setting, so both knobs go back, and the loss's scale names the entry."""
    result = run["equivalence_planted[matrix-trainer-ga4-noclip-gpt2-num-items-ws1]"]
    assert result["outcome"] == "fail", result["reason"]
    assert result["known_issue"]["id"] == "hf_trainer_num_items_unshifted_overcount"
    (message,) = set(errors(result, "equivalence"))
    assert "the knobs turned: ga4, noclip" in message
    assert "the smallest setting found that still shows it (2 reruns" in message
    assert message.rstrip(")").endswith(": the defaults")


def test_the_trainer_routes_name_where_the_divergence_starts(run: dict[str, dict]) -> None:
    """The Trainer's module outputs against the token-mean reference's, replayed to the diverging step: a loss
    normalised per micro-batch leaves the reference at the gradient of the module next to the loss."""
    for case in ("equivalence[trainer-no-loss-kwargs-ws1]", "equivalence[trainer-num-items-ws2]"):
        starts = run[case]["notes"]["divergence_starts"]
        assert "every submodule's forward output" in starts and "is lm_head" in starts, (case, starts)
        assert "it is the module next to the loss" in starts


def test_split_batches_asked_by_the_old_keyword_is_caught_and_the_documented_way_passes(
    tmp_path: Path,
) -> None:
    """Accelerate issue #3177 (open at the installed 1.15.0): `Accelerator(split_batches=True)` splits nothing, so
    at two processes each trains the whole batch and the epoch runs out after half its steps. The matrix's keyword
    setting fails at step 1 and says where the DataLoader ran out, naming the entry; the same batches split through
    `DataLoaderConfiguration` (a warm-up: the prepared scheduler steps once per optimizer step) pass."""
    keyword = "equivalence[matrix-accelerate-ga1-shuffle-split-keyword-ws2]"
    config = "equivalence[matrix-accelerate-ga1-warmup-shuffle-split-config-ws2]"
    proc = ds_doctor(
        "run", "--level", "3", "--out", str(tmp_path), "-k", f"{keyword} or {config}", timeout=300
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = {r["case"]: r for r in read_report(tmp_path)["results"]}
    assert results[config]["outcome"] == "pass", results[config]["reason"]
    result = results[keyword]
    assert result["outcome"] == "fail" and result["known_issue"]["id"] == "acc_split_batches_keyword_ignored"
    divergence, steps = sorted(set(errors(result, "equivalence")))
    assert steps.startswith(
        "the route took 1 optimizer step(s) where plain torch takes 4: the prepared DataLoader ran out at step 2, "
        "micro-batch 1: epoch 0 gave this process 1 micro-batch(es) where the documented sharding gives 2"
    ), steps
    assert divergence.startswith("step 1 of 4: the loss diverges"), divergence
