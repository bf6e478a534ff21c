"""The reference in a process of its own: plain torch, one process, no process group.

The reference is what the user's training computes on one process with the whole global batch. Computed on the
rank itself (where the route's process group is up), a user model that consults the process group (`loss /
dist.get_world_size()` when `dist.is_initialized()`, on top of DDP's own average) divides in the reference too, and
route and reference agree on the wrong answer at every world size. So rank 0 keeps one reference process for its
launch with no process group and none of torchrun's variables: the user's model sees world size 1 there, whatever
the route's. On a torch built for the CPU it is forked from the rank at the launch's start (`prepare`, before
the process group or any thread: `Forked`), sharing what the rank imported; elsewhere (`can_fork`) it is started
afresh (`python -m ds_doctor.probes.equivalence.reference`). Either way torch is imported once per launch, not per case.

Requests and answers go over the process's stdin and stdout as length-prefixed `torch.save` payloads (tensors
included, no numpy needed): a request names what to compute (the family's subject, or the Trainer route's
token-mean run) and its arguments; the answer is the step records, or the error the reference raised.
"""

from __future__ import annotations

import atexit
import io
import os
import struct
import subprocess
import sys
import tempfile
from typing import Any, BinaryIO, cast

#: what a rank's environment holds that would tell the user's code it is one of several
DISTRIBUTED_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)
_HEADER = struct.Struct("<Q")
MAX_PAYLOAD = 1 << 31  # a request or answer this large is no reference of a tiny model


class ReferenceError(RuntimeError):
    """The reference process raised, or died: its message (or the tail of its output)."""


def _write(stream: BinaryIO, value: Any) -> None:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    payload = buffer.getvalue()
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _read(stream: BinaryIO) -> Any:
    import torch

    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the other side closed")
    (size,) = _HEADER.unpack(header)
    if size > MAX_PAYLOAD:
        raise ReferenceError(f"a reference message of {size} bytes")
    payload = stream.read(size)
    if len(payload) < size:
        raise EOFError("the other side closed mid-message")
    return torch.load(io.BytesIO(payload), weights_only=False)  # our own process's, never a user's file


def compute(request: dict[str, Any]) -> Any:
    """In the reference process: `request["call"]` ("module:function", a function of the family's that computes a
    reference) applied to `request["args"]`."""
    import importlib

    module, _, name = str(request["call"]).partition(":")
    if not module.startswith("ds_doctor.probes."):
        raise ValueError(f"not a reference of ds-doctor's: {request['call']!r}")
    return getattr(importlib.import_module(module), name)(*request["args"])


def surroundings() -> dict[str, Any]:
    """What the reference's own process holds that could tell a model it is one of several (none, by design)."""
    import torch.distributed as dist

    return {
        "process_group": dist.is_available() and dist.is_initialized(),
        "variables": sorted(name for name in DISTRIBUTED_VARIABLES if name in os.environ),
    }


def _subject(options: str, model: str | None) -> Any:
    """The route's model (the user's `--model`, a route's own, or the MLP), from the case's run options."""
    from ds_doctor.plugins import RankOptions
    from ds_doctor.probes.equivalence.subject import current_subject

    return current_subject(RankOptions.from_json(options), model)


def subject_reference(options: str, model: str | None, hyper: Any, world_size: int, lrs: Any) -> Any:
    """The family's reference of the route's model."""
    from ds_doctor.probes.equivalence.subject import reference

    return reference(_subject(options, model), hyper, world_size, lrs)


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Answer requests until stdin closes: ("ok", records) or ("error", "Type: message"). Routes that train the same
    model with the same settings at the same world size (ddp, fsdp1, fsdp2 and the ZeRO stages mostly do) share one
    reference: an answer is kept, keyed by its request."""
    answers: dict[str, tuple[str, Any]] = {}
    while True:
        try:
            request = _read(stdin)
        except EOFError:
            return
        key = repr(sorted(request.items()))
        if key not in answers:
            try:
                answers[key] = ("ok", compute(request))
            except Exception as exc:  # the user's model raised in the reference: the case's error, said
                answers[key] = ("error", f"{type(exc).__name__}: {exc}")
        _write(stdout, answers[key])


def can_fork() -> bool:
    """Whether the reference can be forked from this rank: on Linux, torch imported already (the child then imports
    nothing), no thread but this one (a fork copies only this thread; a lock another one held would never be released
    in the child), no process group up yet (the child must have none), and a torch built without CUDA or ROCm: a
    child forked once the rank has touched the GPU driver (torch asks it how many devices there are long before it
    says CUDA is initialized) cannot use the GPU, and a user's model factory may. Elsewhere the reference is started
    afresh, beside a start-up that has cores to spare on a GPU node."""
    import threading

    if not sys.platform.startswith("linux") or "torch" not in sys.modules or threading.active_count() != 1:
        return False
    import torch

    if torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None:
        return False
    return not (torch.distributed.is_available() and torch.distributed.is_initialized())


class Forked:
    """The reference forked from the rank before its process group (`ds_doctor.run.worker.Worker.prepare`): what
    the rank has imported (torch) it shares, copy on write, instead of importing it again beside the launch's
    start-up (~1.3 s of CPU per launch). The child drops torchrun's variables and dies with the rank; the rest is as
    in a process started afresh: no process group, requests and answers over two pipes, prints into the log."""

    def __init__(self, pid: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    @classmethod
    def start(cls, log: BinaryIO) -> Forked:
        requests, to_child = os.pipe()
        from_child, answers = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the rank's code
            try:
                os.close(to_child)
                os.close(from_child)
                _forked_main(requests, answers, log.fileno())
            finally:
                os._exit(0)
        os.close(requests)
        os.close(answers)
        return cls(pid, os.fdopen(to_child, "wb"), os.fdopen(from_child, "rb"))

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        import time

        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"reference {self.pid}", timeout)
            time.sleep(0.01)
        return cast(int, self.returncode)

    def kill(self) -> None:
        import signal

        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def _forked_main(requests: int, answers: int, log: int) -> None:
    """In the forked child: what `main` does in a process of its own."""
    from ds_doctor.plugins.process import end_with_parent

    end_with_parent()
    for name in DISTRIBUTED_VARIABLES:
        os.environ.pop(name, None)
    os.dup2(log, 1)
    os.dup2(log, 2)  # whatever the user's model prints (Python or C) goes to the log, never into the answers
    sys.stdout = sys.stderr
    serve(os.fdopen(requests, "rb"), os.fdopen(answers, "wb"))


class ReferenceProcess:
    """A rank's reference process: started at its first request, kept for the launch, stopped at exit."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | Forked | None = None
        self.log: BinaryIO | None = None  # its stderr (a pipe nobody reads could fill and stop it)

    def _start(self) -> subprocess.Popen[bytes] | Forked:
        from ds_doctor.plugins.process import command

        self.log = tempfile.TemporaryFile()
        atexit.register(self.close)
        if can_fork():
            return Forked.start(self.log)
        env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_VARIABLES}
        return subprocess.Popen(
            command(__name__), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env
        )

    def start(self) -> subprocess.Popen[bytes] | Forked:
        """Start it now (its imports overlap the route's training), if it is not running."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        return self.proc

    def ask(self, request: dict[str, Any]) -> Any:
        proc = self.start()
        stdin, stdout = cast(BinaryIO, proc.stdin), cast(BinaryIO, proc.stdout)
        try:
            _write(stdin, request)
            status, value = _read(stdout)
        except (EOFError, BrokenPipeError) as exc:
            tail = self._stderr_tail()
            self.proc = None
            raise ReferenceError(f"the reference process died ({exc}): {tail}") from None
        if status == "error":
            raise ReferenceError(f"the reference (one process, no process group) raised {value}")
        return value

    def _stderr_tail(self) -> str:
        if self.proc is None or self.log is None:
            return ""
        try:
            self.proc.wait(timeout=5)
            self.log.seek(0)
            return " ".join(self.log.read()[-4000:].decode("utf-8", "replace").split())[-500:]
        except (subprocess.TimeoutExpired, OSError, ValueError):
            return ""

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            for stream in (proc.stdin,):
                if stream is not None:
                    stream.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


_PROCESS = ReferenceProcess()


def prestart(rank: int) -> None:
    """Rank 0's reference process, started before its first case needs it (the probe's setup)."""
    if rank == 0:
        _PROCESS.start()


def _broadcast(answer: tuple[str, Any] | None, device: str) -> tuple[str, Any]:
    """Rank 0's answer on every rank, through two tensor broadcasts (size, then `torch.save` bytes): no object
    collective, which decodes with numpy, and a torch-only node has none."""
    import ctypes

    import torch
    import torch.distributed as dist

    payload = b""
    if answer is not None:
        buffer = io.BytesIO()
        torch.save(answer, buffer)
        payload = buffer.getvalue()
    size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    data = torch.empty(int(size), dtype=torch.uint8, device=device)
    if answer is not None:
        data.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    dist.broadcast(data, src=0)
    if answer is not None:
        return answer
    local = data.cpu().contiguous()
    return cast(
        tuple[str, Any],
        torch.load(io.BytesIO(ctypes.string_at(local.data_ptr(), int(size))), weights_only=False),
    )


def independent(request: dict[str, Any], rank: int = 0, world_size: int = 1, device: str = "cpu") -> Any:
    """The step records of the reference `request` names, computed with no process group: by rank 0's reference
    process, and sent to the other ranks (one reference per launch, not one per rank), its error too, so that no
    rank waits for an answer that never comes."""
    answer: tuple[str, Any] | None = None
    if rank == 0:
        try:
            answer = ("ok", _PROCESS.ask(request))
        except ReferenceError as exc:
            answer = ("error", str(exc))
    if world_size > 1:
        answer = _broadcast(answer, device)
    assert answer is not None
    status, value = answer
    if status == "error":
        raise ReferenceError(value)
    return value


def subject_outputs(
    options: str, model: str | None, hyper: Any, world_size: int, lrs: Any, step: int, rank: int
) -> Any:
    """Each module's output on `rank`'s micro-batch 0 at `step` in the family's reference (where.py)."""
    from ds_doctor.probes.equivalence.subject import reference_outputs

    return reference_outputs(_subject(options, model), hyper, world_size, lrs, step, rank)


def main() -> int:
    from ds_doctor.plugins.process import end_with_parent

    end_with_parent()
    for name in DISTRIBUTED_VARIABLES:  # a second guard: nothing says "one of several" here
        os.environ.pop(name, None)
    sys.stdout.flush()
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the user's model prints (Python or C) goes to the log, never into the answers
    sys.stdout = sys.stderr
    import torch  # noqa: F401  (before the first request: the rank is still training its route meanwhile)

    serve(sys.stdin.buffer, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
