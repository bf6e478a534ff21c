"""What a watched moment costs inside a job: the device map and the checks of one rank, on model shapes built on
`meta` (no memory, real tensor objects), every parameter with a gradient and AdamW's state.

- 70b: a Llama-2-70B shape (80 layers, hidden 8192, GQA k/v 1024, MLP 28672, vocab 32000): 723 parameters,
  3,615 records.
- moe: a DeepSeek-V2-like mixture of experts (60 layers, 160 experts of 3 matrices, hidden 5120): 29,223
  parameters, 146,115 records.

For each: `inspect` (the whole device map as records, then the invariants: what the API did before the watch) and
the watch's moments (`after_prepare`, `step`, `after_load`: rows, offenders made records), best of ROUNDS.
Targets (issue 15): >= 1 M records/s, the 70b moment under 20 ms. Figures are printed, never asserted.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROUNDS = 7


def build(kind: str) -> tuple[Any, Any]:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, h: int, kv: int, inter: int, experts: int = 0, expert_inter: int = 0) -> None:
            super().__init__()
            self.q, self.o = nn.Linear(h, h, bias=False), nn.Linear(h, h, bias=False)
            self.k, self.v = nn.Linear(h, kv, bias=False), nn.Linear(h, kv, bias=False)
            self.input_norm, self.post_norm = nn.RMSNorm(h), nn.RMSNorm(h)
            if experts:
                self.router = nn.Linear(h, experts, bias=False)
                self.experts = nn.ModuleList(
                    nn.ModuleDict(
                        {
                            "gate": nn.Linear(h, expert_inter, bias=False),
                            "up": nn.Linear(h, expert_inter, bias=False),
                            "down": nn.Linear(expert_inter, h, bias=False),
                        }
                    )
                    for _ in range(experts)
                )
            else:
                self.gate, self.up = nn.Linear(h, inter, bias=False), nn.Linear(h, inter, bias=False)
                self.down = nn.Linear(inter, h, bias=False)

    class LM(nn.Module):
        def __init__(self, layers: int, h: int, kv: int, inter: int, vocab: int, **moe: int) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, h)
            self.layers = nn.ModuleList(Block(h, kv, inter, **moe) for _ in range(layers))
            self.norm = nn.RMSNorm(h)
            self.head = nn.Linear(h, vocab, bias=False)

    with torch.device("meta"):
        model = (
            LM(80, 8192, 1024, 28672, 32000)
            if kind == "70b"
            else LM(60, 5120, 5120, 0, 102400, experts=160, expert_inter=1536)
        )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    # AdamW's state after a step: a CPU step count, two moments on the device
    for param in model.parameters():
        param.grad = torch.empty_like(param)
        optimizer.state[param] = {
            "step": torch.tensor(1.0),
            "exp_avg": torch.empty_like(param),
            "exp_avg_sq": torch.empty_like(param),
        }
    return model, optimizer


def best(run: Callable[[], Any]) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(ROUNDS):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    return min(times), out


def measure(kind: str) -> list[tuple[str, int, float]]:
    """(what, records, best seconds) for one shape: inspect, then each of the watch's moments."""
    from ds_doctor.api import inspect
    from ds_doctor.watch import moments
    from ds_doctor.watch.target import Target, name_map_of
    from ds_doctor.watch.watcher import no_gc

    model, optimizer = build(kind)
    gc.collect()
    target = Target(
        kind="bench", module=model, optimizer=optimizer, device="meta", own_name_map=name_map_of(model)
    )
    seconds, result = best(lambda: inspect(model, optimizer))
    rows = [("inspect (all records)", len(result.records), seconds)]
    checks: dict[str, Callable[[], Any]] = {
        "after_prepare": lambda: moments.after_prepare(target, 0),
        "step": lambda: moments.step(target, 0, "step 1", [], []),
        "after_load": lambda: moments.after_load(target, 0, "after_load", []),
    }
    for name, check in checks.items():

        def timed(check: Callable[[], Any] = check) -> Any:
            with no_gc():  # as Watch.moment runs it
                return check()

        seconds, check_result = best(timed)
        rows.append((f"watch {name}", check_result.records, seconds))
    return rows


def main() -> None:
    print(f"{'shape':<5} {'what':<22} {'records':>8} {'ms':>9} {'M records/s':>12}")
    for kind in ("70b", "moe"):
        for what, records, seconds in measure(kind):
            print(f"{kind:<5} {what:<22} {records:>8} {seconds * 1e3:>9.2f} {records / seconds / 1e6:>12.2f}")
        gc.collect()


if __name__ == "__main__":
    main()
