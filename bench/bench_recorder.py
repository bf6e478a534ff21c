"""What the Flight Recorder costs a small collective, since every ds-doctor launch runs with it on.

Two ranks under torchrun (gloo on CPU, nccl where there are two GPUs), a 4-element all_reduce timed over
2,000 calls, best of 5; each setting (TORCH_FR_BUFFER_SIZE 0 and 2000) launched ROUNDS times, alternating,
and the median printed. No target: the figure goes into docs/hangs.md.
"""

from __future__ import annotations

import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROUNDS = 3
CALLS = 2000
WORKER = f"""
import os, time, torch, torch.distributed as dist
backend = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group(backend)
t = torch.ones(4, device="cuda" if backend == "nccl" else "cpu")
for _ in range(200):
    dist.all_reduce(t)
best = 1e9
for _ in range(5):
    dist.barrier()
    start = time.perf_counter()
    for _ in range({CALLS}):
        dist.all_reduce(t)
    if backend == "nccl":
        torch.cuda.synchronize()
    best = min(best, (time.perf_counter() - start) / {CALLS})
if dist.get_rank() == 0:
    print(f"RESULT {{backend}} {{best * 1e6:.2f}}")
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def once(script: Path, buffer: int) -> tuple[str, float]:
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": str(buffer), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "--master-addr=127.0.0.1",
            f"--master-port={free_port()}",
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    ).stdout
    match = re.search(r"RESULT (\w+) ([\d.]+)", out)
    assert match, out
    return match.group(1), float(match.group(2))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "recorder_worker.py"
        script.write_text(WORKER)
        samples: dict[int, list[float]] = {0: [], 2000: []}
        backend = "?"
        for _ in range(ROUNDS):
            for buffer in samples:
                backend, micros = once(script, buffer)
                samples[buffer].append(micros)
    off, on = statistics.median(samples[0]), statistics.median(samples[2000])
    print(
        f"{backend} all_reduce of 4 elements, 2 ranks, median of {ROUNDS} launches (best of 5 x {CALLS} calls):"
    )
    print(f"  recorder off (TORCH_FR_BUFFER_SIZE=0):    {off:8.1f} us   {samples[0]}")
    print(f"  recorder on  (TORCH_FR_BUFFER_SIZE=2000): {on:8.1f} us   {samples[2000]}")
    print(f"  difference: {on - off:+.1f} us per call ({(on - off) / off:+.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
