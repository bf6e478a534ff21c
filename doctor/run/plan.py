"""Plan: which cases run, which are skipped and why, and how they group into torchrun launches.

One launch per (world size, device kind) runs many cases, so process start-up and process-group
set-up are paid once per group, not once per case.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ds_doctor.checks.environment import environment_results
from ds_doctor.checks.health import health_results
from ds_doctor.checks.noderecords import node_record_results
from ds_doctor.probe import registry
from ds_doctor.probe.spec import Case, ProbeSpec, missing_dependency, missing_install_lines
from ds_doctor.reports.model import CaseResult
from ds_doctor.rundir import setup_probe


class KeywordError(ValueError):
    """A `-k` expression that does not parse, or exceeds the bounds below."""


Matcher = Callable[[str], bool]

#: Bounds on `-k`, so a hostile expression is a usage error instead of a RecursionError deep in the parser.
MAX_KEYWORD_CHARS = 2000
MAX_KEYWORD_DEPTH = 64  # nested parentheses and `not`s


def compile_keyword(expr: str) -> Matcher:
    """pytest-style `-k`: case-insensitive substrings joined by `and`, `or`, `not` and parentheses."""
    if len(expr) > MAX_KEYWORD_CHARS:
        raise KeywordError(f"-k expression is {len(expr)} characters long; the limit is {MAX_KEYWORD_CHARS}")
    tokens = re.findall(r"\(|\)|[^\s()]+", expr)
    if not tokens:
        raise KeywordError("empty -k expression")
    return _KeywordParser(expr, tokens).parse()


class _KeywordParser:
    """Recursive descent over one `-k`'s tokens. Each nesting level costs a few Python frames, so the depth bound
    keeps the parser (and the matcher it builds) far from the interpreter's recursion limit."""

    def __init__(self, expr: str, tokens: list[str]) -> None:
        self.expr, self.tokens, self.pos, self.depth = expr, tokens, 0, 0

    def parse(self) -> Matcher:
        matcher = self._or()
        if self.pos != len(self.tokens):
            raise self._error(f"unexpected {self.tokens[self.pos]!r}")
        return matcher

    def _error(self, what: str) -> KeywordError:
        return KeywordError(f"-k {self.expr!r}: {what}")

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> str:
        if self.pos >= len(self.tokens):
            raise self._error("unexpected end of expression")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _chain(
        self, word: str, operand: Callable[[], Matcher], combine: Callable[[Iterable[bool]], bool]
    ) -> Matcher:
        """`operand (word operand)*`, evaluated as one flat any/all: a long `a or a or ...` adds no call depth."""
        operands = [operand()]
        while self._peek() == word:
            self._take()
            operands.append(operand())
        if len(operands) == 1:
            return operands[0]
        return lambda s: combine(matcher(s) for matcher in operands)

    def _or(self) -> Matcher:
        return self._chain("or", self._and, any)

    def _and(self) -> Matcher:
        return self._chain("and", self._not, all)

    def _not(self) -> Matcher:
        token = self._take()
        if token == "not":
            inner = self._nested(self._not)
            return lambda s: not inner(s)
        if token == "(":
            inner = self._nested(self._or)
            if self._take() != ")":
                raise self._error("expected ')'")
            return inner
        if token in (")", "and", "or"):
            raise self._error(f"unexpected {token!r}")
        needle = token.lower()
        return lambda s: needle in s.lower()

    def _nested(self, parse: Callable[[], Matcher]) -> Matcher:
        """One level deeper (a `(` or a `not`), refused past MAX_KEYWORD_DEPTH."""
        if self.depth >= MAX_KEYWORD_DEPTH:
            raise KeywordError(
                f"-k expression nests deeper than {MAX_KEYWORD_DEPTH} levels of parentheses and 'not'"
            )
        self.depth += 1
        try:
            return parse()
        finally:
            self.depth -= 1


def keyword_matcher(keyword: str | None) -> Callable[[str], bool]:
    """The `-k` matcher for case ids; no keyword selects everything."""
    return compile_keyword(keyword) if keyword else (lambda _s: True)


def select_cases(cases: Iterable[Case], *, level: int, keyword: str | None) -> list[Case]:
    """Level 1 runs no probe; 2 the representative cases; 3 every case. `-k` filters by case id."""
    matcher = keyword_matcher(keyword)
    return [c for c in cases if c.level <= level and matcher(c.id)]


def run_node_checks(
    env: Mapping[str, Any], hardware: Mapping[str, Any], keyword: str | None
) -> list[CaseResult]:
    """Runs the node's own checks, at every level (environment rules, GPU health, the node's fault records): their
    results, filtered by `-k` like every case."""
    matcher = keyword_matcher(keyword)
    results = (
        environment_results(env)
        + health_results(hardware.get("gpus") or [], hardware.get("gpus_reason"))
        + node_record_results(hardware, env)
    )
    return [r for r in results if matcher(r.case)]


@dataclasses.dataclass(frozen=True)
class Hardware:
    device_kind: str  # "cuda" or "cpu"
    gpu_count: int

    @property
    def backend(self) -> str:
        return "nccl" if self.device_kind == "cuda" else "gloo"


#: A CUDA device needs NVIDIA's kernel driver: without these, no torch can see one (so none is imported to ask).
NVIDIA_DRIVER = ("/dev/nvidiactl", "/proc/driver/nvidia")


def detect_hardware() -> Hardware:
    """CUDA GPUs as torch sees them (it honours CUDA_VISIBLE_DEVICES); none: CPU. On a node without NVIDIA's
    driver torch is not imported at all (a second and more of every run, on a CPU node)."""
    if not any(os.path.exists(path) for path in NVIDIA_DRIVER):
        return Hardware("cpu", 0)
    try:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        count = 0
    return Hardware("cuda" if count else "cpu", count)


def default_nproc(hardware: Hardware) -> int:
    """Ranks a case may have on this node: every GPU, and at least 2 (ranks then share a GPU: see shared_gpu)."""
    return max(hardware.gpu_count, 2) if hardware.device_kind == "cuda" else 2


def node_world_size(hardware: Hardware, nproc: int | None = None) -> int | None:
    """The world size the hardware families add: all the GPUs (or --nproc); none on a CPU node."""
    if hardware.device_kind != "cuda":
        return None
    return nproc or hardware.gpu_count


#: How ranks share a GPU: NCCL with a distinct NCCL_HOSTID per rank (each rank looks like its own host to NCCL, which
#: then uses its network transport between them; NCCL refuses two ranks on one GPU of one host), or gloo with CUDA
#: tensors. `DS_DOCTOR_SHARED_GPU` picks one; the first is the default.
SHARED_GPU_MODES = {"nccl-hostid": "nccl, a distinct NCCL_HOSTID per rank", "gloo": "gloo over CUDA tensors"}
SHARED_GPU_ENV = "DS_DOCTOR_SHARED_GPU"


def shared_gpu_mode(environ: Mapping[str, str]) -> str:
    """The mode `DS_DOCTOR_SHARED_GPU` picks in `environ` (read once, by the parent, into the run options)."""
    mode = environ.get(SHARED_GPU_ENV) or "nccl-hostid"
    return mode if mode in SHARED_GPU_MODES else "nccl-hostid"


def shared_gpu(hardware: Hardware, ranks_per_node: int, mode: str = "nccl-hostid") -> str | None:
    """How a launch's ranks share this node's GPUs, in words, where there are more ranks than GPUs; else None."""
    if hardware.device_kind != "cuda" or ranks_per_node <= hardware.gpu_count:
        return None
    return f"{ranks_per_node} ranks on {hardware.gpu_count} GPU(s): {SHARED_GPU_MODES[mode]}"


def missing_requirements(spec: ProbeSpec) -> list[str]:
    return missing_install_lines(spec.requires)


@dataclasses.dataclass(frozen=True)
class Skip:
    case: Case
    device_kind: str
    reason: str


@dataclasses.dataclass(frozen=True)
class LaunchGroup:
    world_size: int
    device_kind: str
    backend: str
    cases: tuple[Case, ...]
    nodes: int = 1  # > 1: one launch across this many nodes (world_size ranks in all)
    shared_gpu: str | None = None  # more ranks than GPUs on a node: how they share them, in words
    share_mode: str = "nccl-hostid"  # ... and as a key of SHARED_GPU_MODES

    @property
    def rank_backend(self) -> str:
        """The process group's backend: gloo where ranks share GPUs that way."""
        return "gloo" if self.shared_gpu and self.share_mode == "gloo" else self.backend

    @property
    def name(self) -> str:
        """The launch's name, the same on every node: `ws2`, `ws4-n2`."""
        return f"ws{self.world_size}" + (f"-n{self.nodes}" if self.nodes > 1 else "")


def _skip_reason(
    case: Case, spec: ProbeSpec, hardware: Hardware, nproc: int, overlays: tuple[str, ...] = ()
) -> str | None:
    reason = missing_dependency(spec.requires, overlays)
    if reason:
        return reason
    if hardware.device_kind not in spec.device_kinds:
        return f"needs {' or '.join(spec.device_kinds)}; this node has {hardware.device_kind}"
    if case.nodes == 1 and case.world_size > nproc:
        what = "GPU(s)" if hardware.device_kind == "cuda" else "ranks (--nproc)"
        return f"needs {case.world_size} ranks; this run has {nproc} {what}"
    return None


def plan(
    cases: Iterable[Case],
    hardware: Hardware,
    nproc: int,
    share_mode: str = "nccl-hostid",
    overlays: tuple[str, ...] = (),
) -> tuple[list[LaunchGroup], list[Skip]]:
    """Group runnable cases by world size (and nodes); everything else becomes a skip with its reason. Launches
    inside the node come first, then those across the nodes, in the registry's order within each, except that
    inside a node the cases that run alone come last in their launch (`ds_doctor.run.groups`: the rest overlap the
    node's other launches; a launch across the nodes never takes turns, and keeps the registry's order)."""
    specs = {spec.name: spec for spec in registry.specs()}
    runnable: dict[tuple[int, int], list[Case]] = {}
    skips: list[Skip] = []
    for case in cases:
        reason = _skip_reason(case, specs[case.probe], hardware, nproc, overlays)
        if reason:
            skips.append(Skip(case, hardware.device_kind, reason))
        else:
            runnable.setdefault((case.nodes, case.world_size), []).append(case)
    groups = [
        LaunchGroup(
            ws,
            hardware.device_kind,
            hardware.backend,
            tuple(sorted(group, key=lambda case: case.alone) if nodes == 1 else group),
            nodes,
            shared_gpu(hardware, ws // nodes, share_mode),
            share_mode,
        )
        for (nodes, ws), group in sorted(runnable.items())
    ]
    return groups, skips


def timeout_for(case_or_setup: str, override: float | None) -> float:
    """The timeout of a case id or of `<setup PROBE>`: `--timeout` wins, else the probe's spec."""
    probe = setup_probe(case_or_setup)
    if probe:
        return registry.get(probe).SPEC.setup_timeout_s
    if override is not None:
        return override
    return registry.get(case_or_setup.split("[", 1)[0]).SPEC.timeout_s
