"""`ds-doctor run --level 2` against its floor, side by side in one run (issue 38: at most 1.5x): one bare
`torchrun --nproc-per-node 2` launch of a ZeRO-3 + optimizer and parameter offload script, a few steps of a tiny
model, which is what any DeepSpeed job pays before its first step (torchrun, the imports, the ops loading,
DeepSpeed's initialize, the teardown). Each side twice, alternating, best of each; the ops are built already (the
first launch of a fresh machine builds them: not measured here). Prints both times and the ratio.

Level 2 on this CPU is two launches (ws1, ws2) started together, taking turns for the timed cases
(`ds_doctor.run.groups`); its time is mostly the start-up of three ranks, two torchruns and two reference processes
on two cores, then the timed cases one launch at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from runs import timed_run

BARE = textwrap.dedent("""\
    import deepspeed, torch
    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    for _ in range(3):
        loss = engine(torch.randn(4, 64)).square().mean()
        engine.backward(loss)
        engine.step()
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()  # else gloo's threads can abort the exit ("terminate called ...")
""")


def bare(folder: Path) -> float:
    """One torchrun launch of the bare script, with the ops folder ds-doctor uses (built ops: torch's default, which a
    user's job shares, unless another environment's builds are there)."""
    from ds_doctor.ops import interpreter_first
    from ds_doctor.ops.cache import stamped_root

    script = folder / "bare_zero3_offload.py"
    script.write_text(BARE)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if (built := stamped_root(os.environ)) is not None:  # where the run's build phase left them
        env["TORCH_EXTENSIONS_DIR"] = str(built)
    env["PATH"] = interpreter_first(env.get("PATH"))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,  # gloo can abort at exit after the steps ("terminate called without an active exception")
    )
    return time.perf_counter() - started


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        doctor, floor = [], []
        for round_ in range(2):
            floor.append(bare(folder))
            seconds, report = timed_run(["--level", "2"], folder / f"run{round_}")
            doctor.append(seconds)
            outcomes = sorted({r["outcome"] for r in report["results"]})
        best, base = min(doctor), min(floor)
        print(
            f"bare torchrun ZeRO-3 + offload, 2 ranks: {', '.join(f'{s:.1f}' for s in floor)} s (best {base:.1f})"
        )
        print(
            f"ds-doctor run --level 2: {', '.join(f'{s:.1f}' for s in doctor)} s (best {best:.1f}), outcomes {outcomes}"
        )
        print(f"ratio: {best / base:.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
