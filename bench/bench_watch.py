"""What a watch costs a job over its length (issue 46): a watched moment must cost the same at step 10 and at step
1,000,000, and the watch's memory must not grow with the steps.

A 3-layer MLP (256 wide, batch 64, AdamW) trained on the CPU through a plain `accelerate.Accelerator`, one thread,
N steps: bare, and under `watch(every=1)`, `watch(every=10)`, `watch(every="auto")`, for N in 100, 1,000 and
3,000 (each ROUNDS times, round-robin, the fastest run of each shown: the one least disturbed by other load); then
a long job (100,000 steps where the bare 3,000 say it takes under LONG_LIMIT_S, else 30,000) bare and under
every=10 and every="auto", once each. Each job runs in a child process of its own (its peak RSS is its own).
Printed per job: the total time (watch()'s set-up, the first report with the environment collected, and close
included), watch()'s set-up alone, the ratio to the bare job of the same length, the mean step time of the last
tenth over the first tenth's, the step moments' share of the job's time as the watch measured it (`Watch.share`),
peak RSS and its growth over the RSS before the first step, how many reports were written, and the spacing of
step moments (what `every="auto"` chose last).

Targets (printed PASS/MISS, never asserted): under every=1 a 3,000-step job's last tenth within 1.3x its first
(a moment's cost does not grow with the moments before it); under every=10 the whole 3,000-step job within 1.5x
the bare one. `python bench/bench_watch.py [--quick]` (--quick: 100 and 1,000 steps only, no long job).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LENGTHS = (100, 1_000, 3_000)
MODES = ("bare", "every=1", "every=10", "auto")
LONG_MODES = ("bare", "every=10", "auto")
LONG, SHORTER_LONG = 100_000, 30_000
ROUNDS = 3  # the jobs up to 3,000 steps: each run this often, the fastest run shown (the least disturbed)
LONG_LIMIT_S = 300.0  # one long job's estimated time, past which the long jobs run SHORTER_LONG steps
WIDTH, BATCH = 256, 64


def rss_kb() -> int:
    """This process's resident set now (Linux /proc; 0 elsewhere)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return 0


def child(mode: str, steps: int, out: Path) -> dict[str, Any]:
    """One job, timed step by step: what the parent prints a row of."""
    import resource

    import torch
    from accelerate import Accelerator
    from torch import nn

    from ds_doctor.api import watch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH)
    )
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    before = rss_kb()
    started = time.perf_counter()
    handle = None
    if mode != "bare":
        every: Any = "auto" if mode == "auto" else int(mode.split("=")[1])
        handle = watch(accelerator, out=out / "watch.json", every=every)
    setup = time.perf_counter() - started
    ends, begun = (
        [],
        time.perf_counter(),
    )  # the steps' times start here: watch()'s own set-up is in total_s only
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        ends.append(time.perf_counter())
    chosen, writes, share = None, 0, None
    if handle is not None:
        handle.close()
        chosen, writes, share = handle.spacing, handle.writes, handle.share
    total = time.perf_counter() - started
    times = [b - a for a, b in zip([begun, *ends[:-1]], ends, strict=True)]
    tenth = max(steps // 10, 1)
    return {
        "mode": mode,
        "steps": steps,
        "total_s": total,
        "first_tenth_s": sum(times[:tenth]) / tenth,
        "last_tenth_s": sum(times[-tenth:]) / tenth,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "rss_before_kb": before,
        "writes": writes,
        "setup_s": setup,
        "share": share,
        "every": chosen,
    }


def run(mode: str, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", mode, str(steps), tmp],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    if proc.returncode != 0:
        raise SystemExit(f"{mode} {steps}: the job failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def row(result: dict[str, Any], bare: dict[str, Any]) -> str:
    ratio = result["total_s"] / bare["total_s"]
    drift = result["last_tenth_s"] / result["first_tenth_s"]
    peak = result["peak_rss_kb"] / 1024
    growth = (result["peak_rss_kb"] - result["rss_before_kb"]) / 1024
    every = "" if result["every"] is None else str(result["every"])
    share = "" if result["share"] is None else f"{result['share']:.1%}"
    setup = "" if result["mode"] == "bare" else f"{result['setup_s']:.2f}"
    return (
        f"| {result['mode']:<8} | {result['steps']:>7,} | {result['total_s']:>8.2f} | {setup:>5} | {ratio:>6.2f}x | "
        f"{drift:>6.2f}x | {share:>6} | {peak:>7.0f} | {growth:>6.1f} | {result['writes']:>6} | {every:>5} |"
    )


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        print(json.dumps(child(argv[1], int(argv[2]), Path(argv[3]))))
        return 0
    quick = "--quick" in argv
    lengths = LENGTHS[:2] if quick else LENGTHS
    print(
        f"3-layer MLP {WIDTH} wide, batch {BATCH}, AdamW, Accelerate on CPU, 1 thread; one child process per job"
    )
    print(
        "| mode     |   steps |  total s | watch() s | x bare | last/first tenth | watch share | peak RSS MB "
        "| growth MB | writes | every |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    results: dict[tuple[str, int], dict[str, Any]] = {}
    for steps in lengths:
        for _ in range(ROUNDS):  # round-robin over the modes: a burst of load elsewhere hits them alike
            for mode in MODES:
                result = run(mode, steps)
                if (mode, steps) not in results or result["total_s"] < results[mode, steps]["total_s"]:
                    results[mode, steps] = result
        for mode in MODES:
            print(row(results[mode, steps], results["bare", steps]), flush=True)
    if not quick:
        per_step = results["bare", 3_000]["total_s"] / 3_000
        long = LONG if per_step * LONG < LONG_LIMIT_S else SHORTER_LONG
        print(f"long job: {long:,} steps (bare at {per_step * 1e3:.2f} ms/step)", flush=True)
        for mode in LONG_MODES:
            results[mode, long] = run(mode, long)
            print(row(results[mode, long], results["bare", long]), flush=True)
    top = lengths[-1]
    one, ten, bare = results["every=1", top], results["every=10", top], results["bare", top]
    drift = one["last_tenth_s"] / one["first_tenth_s"]
    ratio = ten["total_s"] / bare["total_s"]
    print(
        f"{'PASS' if drift <= 1.3 else 'MISS'}: every=1, {top:,} steps: last tenth {drift:.2f}x the first (<= 1.3x)"
    )
    print(
        f"{'PASS' if ratio <= 1.5 else 'MISS'}: every=10, {top:,} steps: {ratio:.2f}x the bare job (<= 1.5x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
