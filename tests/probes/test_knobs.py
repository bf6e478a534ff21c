"""The knob matrix's design (every pair of two knobs' values in some setting, the hand-added settings kept, names
unique and stable) and the reference's own learning rates and groups, held to the libraries' real schedulers:
transformers' `get_linear_schedule_with_warmup`, DeepSpeed's `WarmupDecayLR` stepped as its engine steps it, and
Accelerate's prepared scheduler, which steps once per process."""

from __future__ import annotations

import fnmatch
import itertools
import warnings

import pytest

from ds_doctor.probes.equivalence import knobs as k
from ds_doctor.probes.equivalence.cases import beside, design_requests, matrix, needed
from ds_doctor.probes.equivalence.cases import main as cases_main
from ds_doctor.probes.equivalence.subject import Hyper
from tests.conftest import requires_deepspeed


def _pairs(design: list[k.Knobs], offered: dict) -> set[tuple[str, object, str, object]]:
    return {
        (a, getattr(s, a), b, getattr(s, b)) for s in design for a, b in itertools.combinations(offered, 2)
    }


@pytest.mark.parametrize(
    "offered",
    [k.TORCH_KNOBS, k.ACCELERATE_KNOBS, k.DEEPSPEED_KNOBS, k.ZERO_KNOBS, k.ZERO3_KNOBS, k.TRAINER_KNOBS],
)
def test_the_design_covers_every_pair_of_values(offered: dict) -> None:
    design = k.draw(offered)
    assert design[0] == k.Knobs()
    assert _pairs(design, offered) == _pairs(k.combinations(offered), offered)
    assert len(design) < len(k.combinations(offered)) / 4  # a covering design, not the product
    assert all(k.allowed(s) for s in design)
    assert len(set(design)) == len(design)


def test_the_stored_designs_are_what_draw_gives_and_a_stale_one_is_drawn_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every route's design is read from DESIGNS (a run or `list` no longer draws them), as `draw` gives it; a stored
    design holding a setting `allowed` now refuses is drawn again."""
    assert cases_main(["--check"]) == 0, capsys.readouterr().out
    for _, offered, need in design_requests():
        assert k.fingerprint(offered, need) in k._stored()
    key = k.fingerprint(k.TORCH_KNOBS, ())
    refused = {
        "accumulation": 1,
        "sync_each_batch": True,
    }  # sync_each_batch without accumulation means nothing
    assert not k.allowed(k.Knobs(**refused))
    monkeypatch.setattr(k, "_stored", lambda: {key: [{}, refused]})
    assert k.pairs(k.TORCH_KNOBS) == k.draw(k.TORCH_KNOBS)


def test_a_pair_left_out_is_found() -> None:
    """The check above can fail: a design without one of its settings misses a pair."""
    design = k.pairs(k.TORCH_KNOBS)
    full = _pairs(k.combinations(k.TORCH_KNOBS), k.TORCH_KNOBS)
    assert any(_pairs(design[:i] + design[i + 1 :], k.TORCH_KNOBS) != full for i in range(1, len(design)))


def test_the_settings_bugs_needed_are_in_the_matrix_and_names_are_unique() -> None:
    routes = matrix()
    names = [r.name for r in routes]
    assert len(names) == len(set(names))
    for route, settings in needed().items():
        for setting in settings:
            assert "-".join(["matrix", route, *setting.tokens()]) in names
    assert "matrix-deepspeed-z2-ga4-offload" in names
    assert sum(r.level == 2 for r in routes) == 4
    full = matrix("full")
    assert {r.name for r in routes} <= {r.name for r in full} and len(full) > 10 * len(routes)
    assert names == [r.name for r in matrix()]  # deterministic


def test_a_setting_beside_the_design_runs_without_redrawing_it() -> None:
    """A shuffled resume is no pair (`allowed` refuses it): it runs after the design, with its own route fields, and
    the design's settings (which the measured records name) are those of the pairs alone. A setting pairs could hold
    runs beside only with route fields of its own (the partial window with each row's first label masked), and only
    while the design does not hold its knobs (then the design's own would run in its place, without the fields)."""
    routes = {r.name: r for r in matrix()}
    offered = {
        "trainer": k.TRAINER_KNOBS,
        "trainer-deepspeed": k.TRAINER_KNOBS,
        "accelerate": k.ACCELERATE_KNOBS,
        "accelerate-deepspeed": k.ACCELERATE_DEEPSPEED_KNOBS,
        "ddp": k.TORCH_KNOBS,
        "fsdp1": k.TORCH_KNOBS,
        "fsdp2": k.TORCH_KNOBS,
        "deepspeed-z0": k.DEEPSPEED_KNOBS,
        "deepspeed-z1": k.ZERO_KNOBS,
        "deepspeed-z2": k.ZERO_KNOBS,
        "deepspeed-z3": k.ZERO3_KNOBS,
    }
    assert set(beside()) == set(offered)
    for route, extra in beside().items():
        added = []
        design = k.pairs(offered[route], needed().get(route, ()))
        for setting, fields in extra:
            # no pair may hold it: refused, or it sets a knob to a value the route's design is not offered
            unoffered = [
                n for n, v in k.VALUES.items() if getattr(setting, n) not in offered[route].get(n, v[:1])
            ]
            assert not k.allowed(setting) or unoffered or (fields and setting not in design), setting
            added.append(routes["-".join(["matrix", route, *setting.tokens()])])
            assert added[-1].knobs == setting
            assert all(getattr(added[-1], name) == value for name, value in fields.items())
        designed = [
            r.knobs
            for name, r in routes.items()
            if name.startswith(f"matrix-{route}-")
            and not name.startswith(f"matrix-{route}-deepspeed")
            and r not in added
        ]
        assert designed == design[1:], route
    assert routes["matrix-trainer-resume-shuffle"].first_label_masked
    assert routes["matrix-trainer-partial-window"].first_label_masked
    # torch's own open bugs, each a knob no torch route offers to its pairs
    assert routes["matrix-fsdp1-hybrid"].knobs == k.Knobs(hybrid=True)
    assert routes["matrix-fsdp2-state-dict-first"].knobs == k.Knobs(state_dict_first=True)
    # a frozen first layer on every route, offloaded and in bf16 where a stage keeps its own buffers
    frozen = sorted(name for name in routes if "frozen" in name)
    assert len(frozen) == 17 and {"matrix-trainer-frozen", "matrix-trainer-deepspeed-frozen"} <= set(frozen)
    assert routes["matrix-deepspeed-z3-bf16-ga4-frozen"].knobs == k.Knobs(
        frozen=True, precision="bf16", accumulation=4
    )
    # torch's composite schedules, a value of `schedule` no design is offered: where a torch scheduler is the user's
    composite = sorted(name for name in routes if "sequential" in name or "nested" in name)
    assert composite == [
        "matrix-accelerate-nested",
        "matrix-accelerate-sequential",
        "matrix-ddp-nested",
        "matrix-ddp-sequential",
        "matrix-deepspeed-z2-nested-client",
        "matrix-fsdp1-nested",
        "matrix-fsdp2-nested",
    ]
    assert k.resume_at(beside()["trainer"][0][0]) == k.EPOCH_STEPS + 1  # inside the second epoch
    assert k.resume_at(k.Knobs(resume=True)) == k.RESUME_AT


def test_an_entry_of_two_libraries_names_only_the_stacks_holding_both() -> None:
    """transformers #40690 shows on transformers 4 beside Accelerate 1.7-1.14 only: a diverging shuffled resume
    names it there, Accelerate PR #3556's entry on transformers 5 beside Accelerate before 1.7, and neither
    elsewhere."""
    from ds_doctor.probes.equivalence.invariants import matrix_issue

    route = next(r for r in matrix() if r.name == "matrix-trainer-resume-shuffle")

    def stack(transformers: str, accelerate: str):  # type: ignore[no-untyped-def]
        return {"transformers": transformers, "accelerate": accelerate}.get

    assert matrix_issue(route, 1, stack("4.57.6", "1.14.0")) == "hf_trainer_resume_replays_epoch0_order"
    assert (
        matrix_issue(route, 2, stack("5.24.0", "1.6.0")) == "acc_skip_first_batches_set_epoch_not_forwarded"
    )
    for fine in (("4.57.6", "1.6.0"), ("4.57.6", "1.15.0"), ("5.24.0", "1.7.0"), ("5.0.0", "1.14.0")):
        assert matrix_issue(route, 1, stack(*fine)) is None, fine
    # Accelerate's own loop: with set_epoch, PR #4071 (1.7-1.14); without it, issue #3996 on every release (its four
    # conditions outrank the other's three)
    own = next(r for r in matrix() if r.name == "matrix-accelerate-ga1-resume-shuffle")
    assert matrix_issue(own, 2, stack("5.24.0", "1.14.0")) == "acc_skip_first_batches_resets_epoch"
    assert matrix_issue(own, 2, stack("5.24.0", "1.15.0")) is None
    untold = next(r for r in matrix() if r.name == "matrix-accelerate-ga1-resume-shuffle-no-set-epoch")
    for release in ("0.28.0", "1.14.0", "1.15.0"):
        assert matrix_issue(untold, 2, stack("5.24.0", release)) == "acc_resume_loader_epoch_not_saved"


def test_groups_by_name_follow_the_trainers_rule() -> None:
    assert k.group_of("0.weight", "decay") == 0
    assert k.group_of("0.bias", "decay") == 1
    assert k.group_of("model.layers.0.input_layernorm.weight", "rates") == 1
    assert k.group_of("model.norm.weight", "decay") == 1
    assert k.group_of("model.layers.0.mlp.down_proj.weight", "decay") == 0
    assert k.group_of("anything.bias", "one") == 0


def test_the_linear_schedule_is_transformers_own() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = transformers.get_linear_schedule_with_warmup(opt, k.WARMUP, k.TOTAL)
    seen = []
    for _ in range(k.TOTAL):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([k.linear_factor(s) for s in range(k.TOTAL)], abs=0)


@requires_deepspeed
def test_the_deepspeed_schedule_is_warmup_decay_lr_as_the_engine_steps_it() -> None:
    torch = pytest.importorskip("torch")
    from deepspeed.runtime.lr_schedules import WarmupDecayLR

    opt = torch.optim.SGD(
        [{"params": [torch.nn.Parameter(torch.zeros(1))]}, {"params": [torch.nn.Parameter(torch.zeros(1))]}],
        lr=1.0,
    )
    sched = WarmupDecayLR(
        opt,
        total_num_steps=k.TOTAL,
        warmup_min_lr=0.0,
        warmup_max_lr=[1.0, 0.1],
        warmup_num_steps=k.WARMUP,
        warmup_type="linear",
    )
    hyper = Hyper(groups="rates", schedule="deepspeed", lr=1.0)
    for step in range(k.TOTAL):
        assert [g["lr"] for g in opt.param_groups] == pytest.approx(hyper.lrs(step), rel=1e-12)
        opt.step()
        sched.step()


def test_accelerates_prepared_scheduler_strides_by_the_processes() -> None:
    at_two = Hyper(schedule="linear", stride=2)
    assert [at_two.lrs(s)[0] for s in range(3)] == pytest.approx([0.0, Hyper.lr, Hyper.lr * 0.5])
    assert Hyper(groups="rates").lrs(0) == pytest.approx([Hyper.lr, Hyper.lr * k.SECOND_GROUP_RATE])


@requires_deepspeed
@pytest.mark.parametrize("kind", ["WarmupLR", "WarmupCosineLR", "OneCycle"])
def test_deepspeeds_other_schedulers_are_its_own_as_the_engine_steps_them(kind: str) -> None:
    """WarmupLR with its max rate left to the release's default (each group's own since 0.17.2) and WarmupCosineLR,
    over two groups of their own rates: each step's rates are what `Hyper.lrs` computes without them."""
    torch = pytest.importorskip("torch")
    from deepspeed.runtime import lr_schedules

    from ds_doctor.probes.equivalence.sessions import _warmup_lr_default_peak

    opt = torch.optim.SGD(
        [
            {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 1.0},
            {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": k.SECOND_GROUP_RATE},
        ],
        lr=1.0,
    )
    if kind == "WarmupLR":
        sched = lr_schedules.WarmupLR(opt, warmup_min_lr=0.0, warmup_num_steps=k.WARMUP, warmup_type="linear")
        hyper = Hyper(groups="rates", schedule="deepspeed-warmup", lr=1.0, peak=_warmup_lr_default_peak())
    elif kind == "OneCycle":  # the config `sessions` writes: every group from a tenth of the rate, in stairs
        sched = lr_schedules.OneCycle(
            opt,
            cycle_min_lr=k.ONECYCLE_MIN,
            cycle_max_lr=1.0,
            cycle_first_step_size=k.ONECYCLE_STEPS,
            cycle_first_stair_count=k.ONECYCLE_STAIRS,
            cycle_momentum=False,
        )
        hyper = Hyper(groups="rates", schedule="deepspeed-onecycle", lr=1.0)
        # a staircase: flat across each stair (releases <= 0.19.3 ignore the count, PR #8179)
        assert [hyper.lrs(s)[0] for s in range(4)] == pytest.approx([0.1, 0.1, 0.55, 0.55])
    else:
        sched = lr_schedules.WarmupCosineLR(
            opt,
            total_num_steps=k.TOTAL,
            warmup_num_steps=k.WARMUP,
            cos_min_ratio=k.COS_MIN,
            warmup_type="linear",
        )
        hyper = Hyper(groups="rates", schedule="deepspeed-cosine", lr=1.0)
    for step in range(k.ONECYCLE_STEPS if kind == "OneCycle" else k.TOTAL):
        assert [g["lr"] for g in opt.param_groups] == pytest.approx(hyper.lrs(step), rel=1e-12), step
        opt.step()
        sched.step()
    # each group at its own rate (group 0's rate for both is the bug of 0.17.2-0.19.3's WarmupLR): this can fail
    at = hyper.lrs(k.WARMUP + 1)
    if kind == "OneCycle":  # OneCycle's one floor and ceiling: both groups at them
        assert at[1] == at[0] > 0
        return
    assert at[1] == pytest.approx(at[0] * k.SECOND_GROUP_RATE) and at[0] > 0


def test_a_setting_fits_an_entrys_conditions() -> None:
    setting = k.Knobs(precision="bf16", accumulation=4, schedule="cosine", groups="rates", offload=True)
    assert k.fits(["route=deepspeed-z*", "schedule=cosine", "groups=decay|rates"], "deepspeed-z2", setting, 2)
    assert k.fits(["offload=true", "accumulation=2|4", "world_size=2"], "deepspeed-z2", setting, 2)
    assert not k.fits(["world_size=2"], "deepspeed-z2", setting, 1)
    assert not k.fits(["offload=false"], "deepspeed-z2", setting, 2)
    assert not k.fits(["route=deepspeed-z*"], "accelerate-deepspeed", setting, 2)
    assert not k.fits(["schedul=cosine"], "deepspeed-z2", setting, 2)  # a name that is no knob fits nothing
    assert k.fits([], "ddp", k.Knobs(), 1)
    # the earliest step an entry's bug can show: a divergence before it is something else; none known, any fits
    window = ["route=trainer", "partial_window=true", "from_step=2"]
    partial = k.Knobs(partial_window=True)
    assert k.fits(window, "trainer", partial, 1, step=2) and k.fits(window, "trainer", partial, 1)
    assert not k.fits(window, "trainer", partial, 1, step=1)


def test_every_catalog_entrys_conditions_name_knobs_and_values_the_matrix_has() -> None:
    """A condition naming a knob or value no matrix setting has would never fit: each alternative matches one."""
    from ds_doctor.knowledge import catalog
    from ds_doctor.probes.equivalence.cases import MATRIX_ROUTES

    known = {name: [str(v).lower() for v in values] for name, values in k.VALUES.items()}
    known["schedule"] += [*k.DEEPSPEED_SCHEDULES, *k.TORCH_SCHEDULES]
    known |= {"route": [name for name, *_ in MATRIX_ROUTES], "world_size": ["1", "2"]}
    known["from_step"] = [str(step) for step in range(1, Hyper.steps + 1)]
    entries = [issue for issue in catalog.ISSUES if issue.knobs]
    assert len(entries) >= 7
    for issue in entries:
        for condition in issue.knobs:
            name, _, alternatives = condition.partition("=")
            assert name in known, (issue.id, condition)
            for alternative in alternatives.split("|"):
                assert any(fnmatch.fnmatchcase(v, alternative) for v in known[name]), (issue.id, condition)


def test_a_diverging_setting_names_the_entry_it_fits_on_an_affected_release() -> None:
    from ds_doctor.probes.equivalence.invariants import matrix_issue

    cosine = next(
        r
        for r in matrix()
        if r.name.startswith("matrix-deepspeed-z1-") and "cosine" in r.name and "decay" in r.name
    )
    assert matrix_issue(cosine, 1, lambda _package: "0.18.9") == "ds_warmup_cosine_groups_start_at_base_lr"
    assert matrix_issue(cosine, 1, lambda _package: "0.19.0") is None  # fixed: a divergence there is new
    assert matrix_issue(cosine, 1, lambda _package: None) is None  # not installed: no verdict
    plain = next(
        r
        for r in matrix()
        if r.name.startswith("matrix-deepspeed-z1-")
        and r.knobs is not None
        and (r.knobs.schedule, r.knobs.offload, r.knobs.precision) == ("constant", False, "fp32")
    )
    assert matrix_issue(plain, 1, lambda _package: "0.18.9") is None
    norms = next(
        r
        for r in matrix()
        if r.name.startswith("matrix-trainer-")
        and not r.name.startswith("matrix-trainer-deepspeed")
        and r.knobs is not None
        and r.knobs.groups == "decay"
        and not r.knobs.smoothing
    )
    assert matrix_issue(norms, 1, lambda _package: "4.48.3") == "hf_trainer_decays_rmsnorm_weights"
    assert matrix_issue(norms, 1, lambda _package: "4.52.4") == "hf_trainer_decays_final_norm"


def test_the_sgd_knob_is_torchs_sgd_on_every_side() -> None:
    """The reference's optimizer and DeepSpeed's config name the same torch SGD with momentum (L2 weight decay)."""
    torch = pytest.importorskip("torch")
    from ds_doctor.probes.equivalence.sessions import _ds_config, knob_hyper

    route = next(
        r
        for r in matrix()
        if r.name.startswith("matrix-deepspeed-z1-") and r.knobs and r.knobs.optimizer == "sgd"
    )
    hyper = knob_hyper(route, "torch", "deepspeed")
    assert hyper.momentum == k.MOMENTUM and "SGD (momentum 0.9)" in hyper.describe()
    block = _ds_config(route, hyper)["optimizer"]
    assert block == {
        "type": "SGD",
        "params": {"lr": hyper.lr, "momentum": k.MOMENTUM, "weight_decay": hyper.weight_decay},
    }
    optimizer = hyper.optimizer_over([torch.nn.Parameter(torch.zeros(1))])
    assert type(optimizer) is torch.optim.SGD and optimizer.param_groups[0]["momentum"] == k.MOMENTUM


def test_adams_l2_input_adds_the_decay_of_each_group_only_for_adam() -> None:
    """Where Adam's L2 adds weight_decay x the parameter to the gradient, an element where the two cancel is
    near-cancellation for the bf16 allowance: what Adam normalises is their sum, per group (no decay on biases)."""
    torch = pytest.importorskip("torch")
    from ds_doctor.probes.equivalence.subject import _adam_input

    grads = {"0.weight": torch.tensor([-0.01, 0.5]), "0.bias": torch.tensor([0.2])}
    before = {"0.weight": torch.tensor([1.0, 1.0]), "0.bias": torch.tensor([3.0])}
    l2 = _adam_input(Hyper(adamw=False, groups="decay", weight_decay=0.01), grads, before)
    assert l2["0.weight"].tolist() == pytest.approx([0.0, 0.51])  # the first element cancels
    assert l2["0.bias"].tolist() == pytest.approx([0.2])  # the no-decay group
    assert _adam_input(Hyper(groups="decay"), grads, before) is grads  # AdamW: the gradient alone


@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("world_size", [1, 2])
def test_the_shuffle_knobs_reference_order_is_accelerates_seedable_sampler_sharded(
    world_size: int, partial: bool
) -> None:
    """`knobs.documented_order` (what the reference trains on under "shuffle") is what Accelerate's prepared
    DataLoader gives each process, epoch by epoch with `set_epoch`, an epoch cut one micro-batch into its last
    window under "partial_window" too; a wrong seed, epoch, sharding or epoch length fails it."""
    torch = pytest.importorskip("torch")
    data_loader = pytest.importorskip("accelerate.data_loader")

    micro, accumulation = 4, 2
    samples = k.epoch_micro_batches(accumulation, partial) * micro * world_size
    for rank in range(world_size):
        torch.manual_seed(k.SHUFFLE_SEED)  # the job's set_seed before it builds its data
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.arange(samples)), batch_size=micro, shuffle=True
        )
        shard = data_loader.prepare_data_loader(
            loader, num_processes=world_size, process_index=rank, use_seedable_sampler=True
        )
        for epoch in range(2):
            shard.set_epoch(epoch)
            got = [batch[0].tolist() for batch in shard]
            want = [
                k.documented_order(
                    epoch * k.EPOCH_STEPS + s,
                    m,
                    rank,
                    micro,
                    accumulation,
                    world_size,
                    partial_window=partial,
                )
                for s in range(k.EPOCH_STEPS)
                for m in range(k.epoch_window(s, accumulation, partial))
            ]
            assert got == want, (rank, epoch)
    assert k.documented_order(0, 0, 0, micro, accumulation, 1) != k.documented_order(
        2, 0, 0, micro, accumulation, 1
    )


@pytest.mark.parametrize("world_size", [1, 2])
def test_accelerates_partial_window_reference_trains_what_its_sequential_dataloader_deals(
    world_size: int,
) -> None:
    """Under "partial_window" on Accelerate's routes the reference trains micro-batch (step, micro, rank) on
    `subject.drawn_samples`: what the route's prepared sequential DataLoader gives each process, epoch by epoch, the
    last window one micro-batch; a wrong dealing, epoch length or window fails it."""
    torch = pytest.importorskip("torch")
    data_loader = pytest.importorskip("accelerate.data_loader")
    from ds_doctor.probes.equivalence.subject import Hyper, drawn_samples

    hyper = Hyper(accumulation=2, partial_window=True)
    samples = k.epoch_micro_batches(hyper.accumulation, True) * hyper.micro_batch * world_size
    for rank in range(world_size):
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.arange(samples)), batch_size=hyper.micro_batch
        )
        shard = data_loader.prepare_data_loader(loader, num_processes=world_size, process_index=rank)
        for epoch in range(2):
            got = [batch[0].tolist() for batch in shard]
            want = [
                list(drawn_samples(hyper, epoch * k.EPOCH_STEPS + s, m, rank, world_size) or ())
                for s in range(k.EPOCH_STEPS)
                for m in range(k.epoch_window(s, hyper.accumulation, True))
            ]
            assert got == want, (rank, epoch)
    assert drawn_samples(Hyper(), 0, 0, 0, 1) is None  # the step's stream, where no DataLoader draws


@pytest.mark.parametrize("accumulation", [2, 4])
def test_a_partial_window_epoch_is_the_trainers_sequential_epoch_cut_one_micro_batch_into_its_last_window(
    accumulation: int,
) -> None:
    """The Trainer route's stream under "partial_window" (`tokens.micro_indices`, `tokens.window`): each epoch
    deals the same samples in order, EPOCH_STEPS windows, the last of one micro-batch per rank, exactly the
    dataset length `make_trainer` gives its sequential sampler; not offered without accumulation."""
    from ds_doctor.probes.equivalence.subject import Hyper
    from ds_doctor.probes.equivalence.tokens import micro_indices, window

    hyper, world_size = Hyper(accumulation=accumulation, partial_window=True), 2
    length = k.epoch_micro_batches(accumulation, True) * hyper.micro_batch * world_size
    for epoch in range(2):
        dealt = [
            i
            for s in range(epoch * k.EPOCH_STEPS, (epoch + 1) * k.EPOCH_STEPS)
            for m in range(window(hyper, s, None))
            for r in range(world_size)
            for i in micro_indices(s, m, r, hyper, world_size)
        ]
        assert dealt == list(range(length))
    assert [window(hyper, s, None) for s in range(4)] == [accumulation, 1, accumulation, 1]
    assert not k.allowed(k.Knobs(accumulation=1, partial_window=True))
    assert k.allowed(k.Knobs(accumulation=accumulation, partial_window=True, resume=True))


def test_split_batches_deal_the_documented_order_and_the_keyword_alone_splits_nothing_on_1x() -> None:
    """Under "split" the prepared DataLoader's batches are the global micro-batch, split between the processes:
    Accelerate's own sharding with `split_batches` gives each rank exactly the documented order (one order serves
    split and unsplit batches). The keyword of older scripts, `Accelerator(split_batches=True)`, leaves the
    Accelerator's split off from 1.0.0 (accelerate issue #3177), the catalog entry the matrix's keyword setting
    names at two processes and not at one."""
    import dataclasses

    from ds_doctor.knowledge import catalog

    torch = pytest.importorskip("torch")
    data_loader = pytest.importorskip("accelerate.data_loader")
    accelerate = pytest.importorskip("accelerate")

    micro, accumulation, world_size = 4, 1, 2
    samples = k.epoch_micro_batches(accumulation, False) * micro * world_size
    for rank in range(world_size):
        torch.manual_seed(k.SHUFFLE_SEED)
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.arange(samples)), batch_size=micro * world_size, shuffle=True
        )
        shard = data_loader.prepare_data_loader(
            loader,
            num_processes=world_size,
            process_index=rank,
            use_seedable_sampler=True,
            split_batches=True,
        )
        for epoch in range(2):
            shard.set_epoch(epoch)
            got = [batch[0].tolist() for batch in shard]
            want = [
                k.documented_order(epoch * k.EPOCH_STEPS + s, 0, rank, micro, accumulation, world_size)
                for s in range(k.EPOCH_STEPS)
            ]
            assert got == want, (rank, epoch)
    assert k.allowed(k.Knobs(shuffle=True, split="keyword"))
    assert not k.allowed(k.Knobs(split="config"))  # a shuffled DataLoader's batch size
    assert not k.allowed(k.Knobs(shuffle=True, batch_sampler=True, split="config"))
    assert k.Knobs(accumulation=1, shuffle=True, split="keyword").tokens() == [
        "ga1",
        "shuffle",
        "split-keyword",
    ]
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    try:
        assert accelerate.Accelerator(cpu=True, split_batches=True).split_batches is False
    finally:
        AcceleratorState._reset_state(True)
    setting = k.Knobs(accumulation=1, shuffle=True, split="keyword")
    (entry,) = [e for e in catalog.ISSUES if e.id == "acc_split_batches_keyword_ignored"]
    assert k.fits(entry.knobs, "accelerate", setting, 2)
    assert not k.fits(entry.knobs, "accelerate", setting, 1)
    assert not k.fits(entry.knobs, "accelerate", dataclasses.replace(setting, split="config"), 2)


def test_rank_seeds_needs_a_shuffled_dataloader_and_is_accelerates_alone() -> None:
    """Each rank's own seed matters only to a shuffled DataLoader; the knob is Accelerate's (its default sampler)."""
    assert k.allowed(k.Knobs(shuffle=True, rank_seeds=True))
    assert not k.allowed(k.Knobs(rank_seeds=True))
    offers = {
        name: "rank_seeds" in offered
        for name, offered in (
            ("accelerate", k.ACCELERATE_KNOBS),
            ("torch", k.TORCH_KNOBS),
            ("trainer", k.TRAINER_KNOBS),
            ("zero3", k.ZERO3_KNOBS),
        )
    }
    assert offers == {"accelerate": True, "torch": False, "trainer": False, "zero3": False}


@pytest.mark.parametrize("world_size", [1, 2])
def test_the_jobs_own_batch_sampler_draws_the_documented_order_once_told_each_epoch(world_size: int) -> None:
    """The batch-sampler setting's reference is the seedable sampler's documented order: the job's own batch sampler,
    handed out in turn as BatchSamplerShard hands batches, gives exactly that order at every epoch it is told of,
    and epoch 0's again where `set_epoch` never reaches it."""
    from ds_doctor.probes.equivalence.routes import EpochBatchSampler

    assert k.allowed(k.Knobs(shuffle=True, batch_sampler=True))
    assert not k.allowed(k.Knobs(batch_sampler=True))
    assert not k.allowed(k.Knobs(shuffle=True, rank_seeds=True, batch_sampler=True))
    assert k.Knobs(accumulation=1, shuffle=True, batch_sampler=True) in needed()["accelerate"]
    micro, accumulation = 4, 1
    samples = k.epoch_micro_batches(accumulation, False) * micro * world_size
    own = EpochBatchSampler(samples, micro, k.SHUFFLE_SEED)
    drawn = {}
    for epoch in range(2):
        own.set_epoch(epoch)
        drawn[epoch] = list(own)
    for step in range(2 * k.EPOCH_STEPS):
        epoch, within = divmod(step, k.EPOCH_STEPS)
        for rank in range(world_size):
            batch = drawn[epoch][within * accumulation * world_size + rank]
            assert batch == k.documented_order(step, 0, rank, micro, accumulation, world_size)
    assert drawn[0] != drawn[1]


def test_offload_states_runs_only_where_deepspeed_allows_it_and_only_at_zero3() -> None:
    """`engine.offload_states` asserts DeepSpeed's FusedAdam (the config's Adam or AdamW) and no offload of its own:
    other settings are left out; ZeRO-3 offers the knob, ZeRO 1 and 2 do not; DeepSpeed PR #7050's setting (decay
    groups whose order is not the module's, the states moved aside) is added to ZeRO-3's design by hand."""
    from ds_doctor.probes.equivalence import cases

    assert k.allowed(k.Knobs(groups="decay", offload_states=True))
    assert k.allowed(k.Knobs(optimizer="adam", offload_states=True))
    for other in ({"source": "client"}, {"offload": True}, {"optimizer": "sgd"}, {"optimizer": "muon"}):
        assert not k.allowed(k.Knobs(offload_states=True, **other)), other  # type: ignore[arg-type]
    assert set(k.ZERO3_KNOBS) - set(k.ZERO_KNOBS) == {"offload_states"}
    names = [r.name for r in cases.matrix()]
    assert "matrix-deepspeed-z3-decay-offload-states" in names
    assert not any("offload-states" in n for n in names if not n.startswith("matrix-deepspeed-z3-"))


@pytest.mark.parametrize(
    ("stage", "release", "has"),
    [
        (1, "0.16.4", False),
        (2, "0.17.5", False),
        (2, "0.17.6", True),
        (3, "0.18.8", False),
        (3, "0.18.9", True),
    ],
)
def test_muon_settings_skip_on_a_deepspeed_without_its_muon(stage: int, release: str, has: bool) -> None:
    """Before DeepSpeed's own Muon (ZeRO-1/2: 0.17.6, read in the release's tree; ZeRO-3: 0.18.9) a config's "Muon"
    reaches torch's `torch.optim.Muon` (0.16.4: "unexpected keyword argument 'betas'", an error on every Muon setting
    of the matrix): the settings skip, saying which release brought it."""
    from ds_doctor.probes.equivalence.sessions import muon_missing

    why = muon_missing(stage, release)
    assert (why is None) == has
    if why is not None:
        assert f"DeepSpeed {release} has no Muon at ZeRO-{stage}" in why


def test_the_drawn_order_is_gathered_by_epoch_and_a_sample_dealt_twice_is_named() -> None:
    """`probe.drawn_order`: every rank's drawn samples gathered into the order the reference trains on, each epoch
    held to the dataset once (two ranks that shuffled alike but were dealt the same shard fail on it)."""
    import dataclasses

    from ds_doctor.probes.equivalence import cases
    from ds_doctor.probes.equivalence.probe import drawn_order
    from ds_doctor.probes.equivalence.subject import Hyper

    route = cases.with_knobs(
        cases.Route("matrix-accelerate-ga1-shuffle-rank-seeds", cases.Wrapper.ACCELERATE, "planted"),
        k.Knobs(accumulation=1, shuffle=True, rank_seeds=True),
    )
    hyper = Hyper(
        accumulation=1, micro_batch=2, shuffle=True
    )  # 4 steps: two epochs of 2 x 1 x 2 x 2 = 8 samples

    @dataclasses.dataclass
    class Ctx:
        ranks: list[list[list[object]]]
        world_size: int = 2

        def all_gather_json(self, _mine: object) -> list[list[list[object]]]:
            return self.ranks

    class Opened:
        def __init__(self, ctx: Ctx) -> None:
            self.ctx, self.route, self.hyper, self.drawn, self.samples = ctx, route, hyper, [], 8

    dealt = [[[s, 0, [4 * (s % 2) + 2 * r, 4 * (s % 2) + 2 * r + 1]] for s in range(4)] for r in range(2)]
    ordered, findings = drawn_order(Opened(Ctx(dealt)))  # type: ignore[arg-type]
    assert findings == [] and ordered.order is not None and len(ordered.order) == 8
    assert (2, 0, 1, (2, 3)) in ordered.order  # step 2 (epoch 1), rank 1: its second pair again
    same = [[[s, 0, [4 * (s % 2), 4 * (s % 2) + 1]] for s in range(4)] for _r in range(2)]  # both ranks alike
    _, findings = drawn_order(Opened(Ctx(same)))  # type: ignore[arg-type]
    assert [f.data["epoch"] for f in findings] == [0, 1]
    assert findings[0].data["twice"] == [0, 1, 4, 5] and findings[0].data["never"] == [2, 3, 6, 7]


def test_the_frozen_knob_freezes_the_first_layer_on_both_sides_and_the_reference_keeps_it() -> None:
    """The route's module and the reference's come from one place (`Hyper.module`): the first layer frozen on both,
    its parameters out of every group, exactly as they started after every step; the others trained."""
    pytest.importorskip("torch")
    from ds_doctor.probes.equivalence.subject import family_subject, reference

    subject = family_subject()
    hyper = Hyper(frozen=True, groups="decay", steps=2)
    module = hyper.module(subject, 2)
    frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
    assert frozen == ["0.weight", "0.bias"]
    grouped = {id(p) for g in hyper.param_groups(module.named_parameters()) for p in g["params"]}
    assert not any(id(p) in grouped for n, p in module.named_parameters() if n in frozen)
    start = dict(module.named_parameters())
    plain, held = reference(subject, Hyper(steps=2), 2, None), reference(subject, hyper, 2, None)
    for name in frozen:
        assert all(step.params[name].equal(start[name].detach()) for step in held), name
        assert not plain[-1].params[name].equal(start[name].detach()), (
            name
        )  # trained where nothing freezes it
    assert not held[-1].params["2.weight"].equal(start["2.weight"].detach())


@requires_deepspeed
def test_onecycles_cycled_momentum_is_beta1_as_its_docstring_and_the_engine_step_it() -> None:
    """DeepSpeed's OneCycle at its default `cycle_momentum`, over a torch AdamW as the engine steps it (after each
    optimizer step): `cycle_min_mom` ("Initial momentum") at step 0, then inversely to the rate in its stairs. Only
    beta1 is the reference's to follow: beta2 is the optimizer's (0.19.8 writes 0.99 there: an entry of its own)."""
    torch = pytest.importorskip("torch")
    from deepspeed.runtime import lr_schedules

    from ds_doctor.probes.equivalence.sessions import _knob_scheduler

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0, betas=(0.9, 0.999))
    hyper = Hyper(schedule="deepspeed-onecycle", lr=1.0, cycle_momentum=True)
    params = _knob_scheduler("onecycle", hyper)["params"]
    assert "cycle_momentum" not in params  # its default, True
    sched = lr_schedules.OneCycle(opt, **params)
    seen = []
    for step in range(k.ONECYCLE_STEPS):
        seen.append(opt.param_groups[0]["betas"][0])
        assert hyper.betas_at(step) == (pytest.approx(seen[-1]), 0.999)
        opt.step()
        sched.step()
    assert seen == pytest.approx([k.ONECYCLE_MIN_MOM, k.ONECYCLE_MAX_MOM, 0.85, 0.85])
    # off, the configured betas throughout; and no cycled momentum without OneCycle
    assert Hyper().betas_at(2) == Hyper.betas
    assert not k.allowed(k.Knobs(cycle_momentum=True)) and k.allowed(
        k.Knobs(schedule="onecycle", cycle_momentum=True)
    )
    assert "cycle_momentum" in _knob_scheduler("onecycle", Hyper(schedule="deepspeed-onecycle"))["params"]


def test_the_sequential_schedule_is_torchs_sequentiallr_and_the_nested_one_is_documented_the_same() -> None:
    """The reference's factor for torch's composites is the documented one (LinearLR's ramp, then
    CosineAnnealingLR's closed form from its own step 0) and equals torch's plain `SequentialLR` over two groups of
    their own rates; the nested route is that `SequentialLR` inside another (its docs: a no-op wrapper), which at
    torch 2.13 runs one step ahead from step 1 (issue #196243): the case that shows it must see the shift."""
    torch = pytest.importorskip("torch")
    from ds_doctor.probes.equivalence.routes import nested_schedule, sequential_schedule, torch_schedule

    def lrs(build: object) -> list[list[float]]:
        opt = torch.optim.SGD(
            [
                {"params": [torch.nn.Parameter(torch.zeros(1))]},
                {"params": [torch.nn.Parameter(torch.zeros(1))]},
            ],
            lr=1.0,
        )
        opt.param_groups[1]["lr"] = k.SECOND_GROUP_RATE
        sched = build(opt)  # type: ignore[operator]
        seen = []
        for _ in range(k.TOTAL + 1):
            seen.append([g["lr"] for g in opt.param_groups])
            opt.step()
            sched.step()
        return seen

    hyper = Hyper(groups="rates", schedule="sequential", lr=1.0, weight_decay=0.0)
    documented = [hyper.lrs(step) for step in range(k.TOTAL + 1)]
    assert [row[0] for row in documented] == pytest.approx([0.25, 0.625, 1.0, 0.8535534, 0.5, 0.1464466, 0.0])
    assert lrs(sequential_schedule) == [pytest.approx(row, rel=1e-12, abs=1e-15) for row in documented]
    assert Hyper(groups="rates", schedule="nested", lr=1.0, weight_decay=0.0).lrs(3) == documented[3]
    with (
        warnings.catch_warnings()
    ):  # the inner one stepped at construction warns of a step before optimizer.step
        warnings.simplefilter("ignore", UserWarning)
        nested = lrs(nested_schedule)
    assert nested[0] == pytest.approx(documented[0]) and nested[1] != pytest.approx(documented[1])
    assert torch_schedule(Hyper(schedule="nested")) is nested_schedule and torch_schedule(Hyper()) is None


def test_the_classify_heads_reference_is_the_global_batchs_mean_loss_as_a_classifier_documents_it() -> None:
    """The classify setting's reference (each micro-batch's mean over the window and the ranks, their gradients
    summed) is, with micro-batches of one size, the cross-entropy mean over the whole global batch: held here to
    torch's own mean over every row of the step at once, on the same classifier, at two ranks and a window of 2."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ds_doctor.probes.equivalence.tokens import (
        _class_step,
        _token_trainee,
        build_classifier,
        micro_indices,
        stacked,
    )

    hyper = Hyper(head="classify", accumulation=2, steps=1, clip=0.0, momentum=0.0, weight_decay=0.0)
    trainee = _token_trainee("qwen2", torch.float64, hyper)
    assert type(trainee[0]).__name__ == "Qwen2ForSequenceClassification"
    loss, norm = _class_step(trainee, hyper, 2, 0, 0.0, torch.float64)  # lr 0: the gradient alone
    mine = {n: p.grad.clone() for n, p in trainee[0].named_parameters()}
    model = build_classifier("qwen2").to(torch.float64)
    rows = [i for r in range(2) for m in range(2) for i in micro_indices(0, m, r, hyper, 2)]
    batch = stacked(rows, model.config.vocab_size, head="classify")
    assert sorted(int(c) for c in batch["labels"]) != [int(batch["labels"][0])] * len(rows)  # several classes
    whole = torch.nn.functional.cross_entropy(
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits, batch["labels"]
    )
    whole.backward()
    assert loss == pytest.approx(float(whole), rel=1e-12)
    for name, param in model.named_parameters():
        assert torch.allclose(mine[name], param.grad, rtol=1e-9, atol=1e-12), name
    assert norm == pytest.approx(
        float(torch.linalg.vector_norm(torch.stack([g.norm() for g in mine.values()])))
    )


def test_the_trainer_settings_take_the_cpu_argument_by_each_releases_name() -> None:
    """The Trainer route's arguments run on releases before `use_cpu` (4.35) and `ddp_backend`: `no_cuda` there, and
    an argument the release lacks is left out only where it is None (one set to a value still raises)."""
    import types

    transformers = pytest.importorskip("transformers")
    from ds_doctor.probes.equivalence.trainer import _training_arguments

    args = _training_arguments(
        transformers, output_dir="unused", use_cpu=True, ddp_backend=None, report_to="none"
    )
    assert args.use_cpu is True

    class Old:  # the signature of 4.26.1's TrainingArguments, as far as these arguments go
        def __init__(self, output_dir: str, no_cuda: bool = False, report_to: str | None = None) -> None:
            self.output_dir, self.no_cuda = output_dir, no_cuda

    old = types.SimpleNamespace(TrainingArguments=Old)
    made = _training_arguments(old, output_dir="unused", use_cpu=True, ddp_backend=None, report_to="none")
    assert made.no_cuda is True
    with pytest.raises(TypeError, match="ddp_backend"):
        _training_arguments(old, output_dir="unused", use_cpu=True, ddp_backend="gloo")
