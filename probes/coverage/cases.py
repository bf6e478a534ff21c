"""The optimizer-coverage family's cases: each a `Route` (what wraps the four-part model and its one-group
optimizer, in which order the user's code builds them, and what a reproducing route shows), and the variants a run
expands them to (the user's DeepSpeed config adds one)."""

from __future__ import annotations

import dataclasses

from ds_doctor.plugins import RankOptions, Variant, Wrapper
from ds_doctor.plugins.usersetup import UserConfig


@dataclasses.dataclass(frozen=True)
class Route:
    """How the user's code wraps the model and its one-group optimizer."""

    name: str
    what: str  # in words, for the report
    wrapper: Wrapper  # what wraps the model (`routes.WRAPPERS`)
    optimizer_before_wrap: bool = False
    orig_params: bool = True  # FSDP1's use_orig_params
    stage: int = 2  # DeepSpeed's ZeRO stage
    parts: tuple[str, ...] = ("a", "head")  # the modules whose parameters make the optimizer's one group
    reproduce: bool = False
    level: int = 3
    user: UserConfig | None = None  # the deepspeed route on the user's --deepspeed-config
    groups: bool = False  # one param group per part, not one over them all
    known_issue: str = "fsdp_optimizer_built_before_wrap"  # what a reproduce route shows


_DS_WHAT = "deepspeed.initialize(model, optimizer=AdamW(group)), ZeRO stage {}"
ROUTES = (
    Route("fsdp1-orig", "FSDP1(use_orig_params=True), optimizer built after wrapping", Wrapper.FSDP1),
    Route(
        "fsdp1-orig-opt-before-wrap",
        "FSDP1(use_orig_params=True), optimizer built before wrapping",
        Wrapper.FSDP1,
        optimizer_before_wrap=True,
    ),
    Route(
        "fsdp1-flat",
        "FSDP1(use_orig_params=False), one FlatParameter per Linear, optimizer built after wrapping",
        Wrapper.FSDP1,
        orig_params=False,
    ),
    Route(
        "fsdp1-flat-opt-before-wrap",
        "FSDP1(use_orig_params=False), optimizer built before wrapping",
        Wrapper.FSDP1,
        optimizer_before_wrap=True,
        orig_params=False,
        reproduce=True,
    ),
    Route(
        "fsdp2",
        "FSDP2 fully_shard on each Linear and the root, optimizer built after wrapping",
        Wrapper.FSDP2,
        level=2,
    ),
    Route(
        "fsdp2-opt-before-wrap",
        "FSDP2 fully_shard, optimizer built before wrapping",
        Wrapper.FSDP2,
        optimizer_before_wrap=True,
        reproduce=True,
    ),
    *(
        Route(
            f"deepspeed-z{stage}",
            _DS_WHAT.format(stage),
            Wrapper.DEEPSPEED,
            stage=stage,
            level=2 if stage == 2 else 3,
        )
        for stage in (0, 1, 2, 3)
    ),
    Route(
        "deepspeed-z2-frozen-in-group",
        "deepspeed.initialize, ZeRO stage 2, with the frozen c in the optimizer's "
        "group (ZeRO drops it on purpose: an info)",
        Wrapper.DEEPSPEED,
        parts=("a", "c", "head"),
    ),
    Route(
        "accelerate-deepspeed",
        "Accelerator(deepspeed_plugin) prepare(model, AdamW(group), dataloader), ZeRO 2",
        Wrapper.ACCELERATE_DEEPSPEED,
    ),
    Route(
        "accelerate-fsdp",
        "Accelerator(fsdp_plugin) prepare(model, AdamW(group)), optimizer built before prepare",
        Wrapper.ACCELERATE_FSDP,
    ),
    Route(
        "composer",
        "Composer Trainer with FSDP (use_orig_params) and a one-group optimizer over a and head",
        Wrapper.COMPOSER,
        reproduce=True,
        known_issue="composer_single_group_rebuild",
    ),
    Route(
        "composer-two-groups",
        "Composer Trainer with FSDP (use_orig_params), a and head in two param groups "
        "(the remedy of mosaicml/composer#3493)",
        Wrapper.COMPOSER,
        groups=True,
    ),
)


def variants(options: RankOptions) -> list[Variant]:
    routes = list(ROUTES)
    user = options.user_deepspeed_config()
    if user is not None:
        routes.append(
            Route(
                "deepspeed-user-config",
                "deepspeed.initialize(model, optimizer=AdamW(group)) with your DeepSpeed config",
                Wrapper.DEEPSPEED,
                level=2,
                user=user,
            )
        )
    return [
        Variant(name=route.name, params=route, level=route.level, reproduce=route.reproduce)
        for route in routes
    ]
