"""False alarms of the equivalence family, measured: healthy configurations that must all pass.

A matrix of real runs, each a fresh `ds-doctor run --level 3` process: the family's routes (DDP, FSDP1, FSDP2,
DeepSpeed ZeRO 0-3 with and without offload, Accelerate, Accelerate + DeepSpeed, the Trainer, the three resume paths)
at one and two ranks, on the probes' MLP and on tiny real architectures (`--model hf:gpt2`, `hf:qwen3`, `hf:llama`),
and a user-style DeepSpeed config of `auto` values with accumulation, bf16 and both offloads
(`--deepspeed-config`, the transformers docs' shape). A configuration is one case that is not a reproduction of a
known trap (the Trainer's designed divergences are xfail/xpass, facts about a library, not alarms); an alarm is
such a case that fails or errors. Prints every alarm and the count; exit 1 on any alarm. The figure goes in
docs/invariants.md (issue 34: at least 30 healthy configurations, 0 alarms)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from runs import timed_run

AUTO_CONFIG = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
    },
    "scheduler": {
        "type": "WarmupLR",
        "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"},
    },
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu"},
        "offload_param": {"device": "cpu"},
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
    },
}
# the model and the cases of each run (the resume and Trainer routes once, on the MLP run: they bring their own)
MATRIX = (
    ("mlp", [], "equivalence"),
    ("hf:gpt2", ["--model", "hf:gpt2"], "equivalence and not resume and not trainer"),
    (
        "hf:qwen3 + auto config",
        ["--model", "hf:qwen3", "--deepspeed-config", "{config}"],
        "equivalence and not resume and not trainer",
    ),
    ("hf:llama", ["--model", "hf:llama"], "equivalence and not resume and not trainer and not offload"),
)


def main() -> int:
    configurations, alarms = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "ds_config.json"
        config.write_text(json.dumps(AUTO_CONFIG))
        for index, (label, extra, keyword) in enumerate(MATRIX):
            args = ["--level", "3", "-k", keyword, *(a.replace("{config}", str(config)) for a in extra)]
            elapsed, report = timed_run(args, Path(tmp) / f"run-{index}")
            judged = [r for r in report["results"] if r["outcome"] in ("pass", "fail", "error", "timeout")]
            wrong = [r for r in judged if r["outcome"] != "pass"]
            configurations += len(judged)
            alarms += [(label, r["case"], r["outcome"], (r["reason"] or "")[:200]) for r in wrong]
            print(f"{label}: {len(judged)} healthy configuration(s), {len(wrong)} alarm(s), {elapsed:.0f} s")
    for label, case, outcome, reason in alarms:
        print(f"  ALARM {label} {case} {outcome}: {reason}")
    print(f"false alarms: {len(alarms)} of {configurations} healthy configurations")
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
