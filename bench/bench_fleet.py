"""What `ds-doctor fleet` costs as the fleet grows (issue 46): a cluster's nightly reports are thousands of
430 KB files, and the fleet view must come back in a minute within a GB, and still name the one bad node.

The template is one real level-2 report (argv[1], or $DS_DOCTOR_BENCH_REPORT, else one `ds-doctor run --level 2`,
a minute or two). Its JSON is serialized once with sentinels where the host, the times, each compared measure
(busbw, algbw, TFLOP/s), DeepSpeed's version and NCCL's are, and each node's file is that text with its own values
joined in (0.1 ms a node; writing each through `Report.to_json` would cost more than `fleet` reading it): every
measure the template's times 1 + N(0, 2 %), seeded. Planted at random indices: a slow node (every comm
bandwidth x 0.6) and a skewed one (deepspeed 0.15.4, another NCCL). The files lie as the nightly job keeps them,
`<STATE>/<host>/reports/ds-doctor-<host>-<time>.json`, in a folder under /tmp removed after each size.

1. One night, N = 100, 1,000, 10,000 nodes: `ds-doctor fleet DIR --json` as a child process, its wall time and the
   peak of the summed RSS of it and its reader processes (psutil, every 50 ms: shared pages counted in each
   process, an upper bound). The JSON must name the slow node below the median and the skewed one deviating, and
   no other node (each other node named is a false alarm). The files were just written, so this reads them from the
   page cache; the 10,000 are then read again with their pages dropped (`evict`), as a morning's run finds reports
   written overnight on a disk or a share. Target (PASS/MISS, never asserted): 10,000 nodes within 60 s and 1 GB.
2. Across nights, 2 % noise a night and one node whose busbw and algbw lose 2 % a night (x 0.98**night): 30 nights
   x 100 nodes as JSON and 30 nights x 1,000 nodes as a Parquet results table (`write_table` of the template's
   Report with each node-night's host, times and measures), each read by `fleet DIR --since 30d --json`: the
   declining node must be the only one drifting (and the only one named). Then a 10,000-node one-night table read
   by `fleet TABLE --json`, planted as in 1.

`python bench/bench_fleet.py [REPORT] [--quick] [--svg PATH]`: --quick runs N = 100 and 1,000, the table across
nights with 100 nodes, no cold read and no 10,000-node table; --svg writes the one-night cost curve (page cache)
as a small chart. Every table is printed in Markdown (docs/scale.md has them). Each row also gives the CPU seconds
of the fleet's processes and what the rest of the machine ran meanwhile: a busy box lengthens the wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import json
import multiprocessing
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

SIZES = (100, 1_000, 10_000)
#: each node's measure against the template's, one standard deviation (and a night's, across nights)
NOISE = 0.02
SLOW = 0.6  # the slow node's comm bandwidths
DECLINE = 0.98  # the declining node's busbw and algbw, a night
NIGHTS = 30
JSON_NIGHT_NODES = 100
TABLE_NIGHT_NODES, QUICK_TABLE_NIGHT_NODES = 1_000, 100
TABLE_NODES = 10_000
COMPARED = ("busbw_gbps", "algbw_gbps", "tflops")
COMM = ("busbw_gbps", "algbw_gbps")
NCCL, SKEW_NCCL = "2.21.5", "2.18.3"  # the template ran on a CPU (no NCCL): every node gets one
SKEW_DEEPSPEED = "0.15.4"
TARGET_S, TARGET_MB = 60.0, 1024.0
POLL_S = 0.05
ALIGN = "|---:|---:|---:|---:|---:|---|---:|"  # COMMON's
COMMON = "generate s | fleet s | CPU s | others' CPU s | peak MB | planted found | false alarms"
FLEET_TIMEOUT_S = 1800
SENTINEL = re.compile(r'"@@([A-Za-z0-9_]+)@@"')


@dataclasses.dataclass(frozen=True)
class Node:
    """One node's run of one night: what its file holds apart from the template."""

    host: str
    started: dt.datetime
    comm: float = 1.0  # its comm bandwidths' factor (the slow node, the declining one)
    deepspeed: str | None = None  # None: the template's
    nccl: str = NCCL
    seed: str = ""

    @property
    def stamp(self) -> str:
        return self.started.strftime("%Y%m%dT%H%M%SZ")

    @property
    def run(self) -> str:
        return f"ds-doctor-{self.host}-{self.stamp}"

    def times(self) -> tuple[str, str]:
        finished = self.started + dt.timedelta(seconds=12)
        return self.started.strftime("%Y-%m-%dT%H:%M:%SZ"), finished.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class Slot:
    """One compared measure of the template: a result's index, the measure, its value there."""

    index: int
    name: str
    value: float

    @property
    def key(self) -> str:
        return f"m{self.index}_{self.name}"


class Template:
    """The report every node's file is made from: its JSON split at the sentinels (text, name, text, name, ...),
    and as a Report (for the Parquet table). Loaded once per generating process tree (the workers fork)."""

    def __init__(self, path: Path) -> None:
        from ds_doctor.run.recover import load_report_file

        text = path.read_text()
        data = json.loads(text)
        if json.dumps(data, indent=2) + "\n" != text:
            print(f"note: {path} is not formatted as json.dumps(indent=2): the nodes' files are", flush=True)
        self.slots = _slots(data["results"])
        self.deepspeed = str(data["env"]["packages"].get("deepspeed"))
        data["hardware"]["host"] = "@@host@@"
        data["started_at"], data["finished_at"] = "@@started@@", "@@finished@@"
        data["env"]["packages"]["deepspeed"] = "@@deepspeed@@"
        data["env"]["nccl"] = "@@nccl@@"
        for slot in self.slots:
            data["results"][slot.index]["measures"][slot.name] = f"@@{slot.key}@@"
        self.pieces = SENTINEL.split(json.dumps(data, indent=2) + "\n")
        self.report = load_report_file(path)
        self.bytes = len(text)

    def values(self, node: Node) -> dict[str, float]:
        """Each compared measure of `node`: the template's x (1 + noise) x its comm factor."""
        rng = random.Random(node.seed)
        return {
            slot.key: float(
                f"{slot.value * (1 + rng.gauss(0, NOISE)) * (node.comm if slot.name in COMM else 1.0):.6g}"
            )
            for slot in self.slots
        }

    def json_text(self, node: Node) -> str:
        """`node`'s report file: the template's text with its values in place of the sentinels."""
        started, finished = node.times()
        values: dict[str, Any] = {
            **self.values(node),
            "host": node.host,
            "started": started,
            "finished": finished,
            "deepspeed": node.deepspeed or self.deepspeed,
            "nccl": node.nccl,
        }
        parts = list(self.pieces)
        parts[1::2] = [json.dumps(values[name]) for name in self.pieces[1::2]]
        return "".join(parts)

    def report_of(self, node: Node) -> Any:
        """`node`'s run as a Report (the template's, with its host, times, versions and measures)."""
        report = self.report
        started, finished = node.times()
        values = self.values(node)
        results = list(report.results)
        for slot in self.slots:
            result = results[slot.index]
            results[slot.index] = dataclasses.replace(
                result, measures={**result.measures, slot.name: values[slot.key]}
            )
        packages = {**report.env.packages, "deepspeed": node.deepspeed or self.deepspeed}
        return dataclasses.replace(
            report,
            started_at=started,
            finished_at=finished,
            hardware=dataclasses.replace(report.hardware, host=node.host),
            env=dataclasses.replace(report.env, packages=packages, nccl=node.nccl),
            results=tuple(results),
        )


def _slots(results: list[dict[str, Any]]) -> list[Slot]:
    return [
        Slot(index, name, float(value))
        for index, result in enumerate(results)
        for name, value in (result.get("measures") or {}).items()
        if name in COMPARED and isinstance(value, (int, float)) and not isinstance(value, bool)
    ]


_TEMPLATE: Template | None = None  # set before the generating workers fork: theirs too


def _template() -> Template:
    assert _TEMPLATE is not None
    return _TEMPLATE


def write_json(root: Path, node: Node) -> None:
    """As the nightly job keeps it: `<STATE>/<host>/reports/ds-doctor-<host>-<time>.json`."""
    folder = root / node.host / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{node.run}.json").write_text(_template().json_text(node))


def write_parquet(root: Path, node: Node) -> None:
    """As `run --table` writes it: `night=<date>/node=<host>/<run>.parquet`."""
    from ds_doctor.table.parquet import write_table

    write_table(_template().report_of(node), root, node.run)


def generate(write: Callable[[Path, Node], None], root: Path, nodes: list[Node]) -> float:
    """Every node's file written by workers over the cores; the seconds it took."""
    started = time.perf_counter()
    workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for _ in pool.imap_unordered(functools.partial(write, root), nodes, chunksize=64):
            pass
    return time.perf_counter() - started


@dataclasses.dataclass(frozen=True)
class Plant:
    slow: str = ""
    skew: str = ""
    declining: str = ""


def host(index: int) -> str:
    return f"node{index:05d}"


def last_start() -> dt.datetime:
    """Tonight's runs: ten minutes ago (UTC), whole seconds, so that `--since 30d` holds 30 nights ending today."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=10)


def one_night(count: int, rng: random.Random, seed: int) -> tuple[list[Node], Plant]:
    """`count` nodes of tonight, a slow one and a skewed one at random indices."""
    slow, skew = rng.sample(range(count), 2)
    started = last_start()
    nodes = [
        Node(
            host(i),
            started,
            comm=SLOW if i == slow else 1.0,
            deepspeed=SKEW_DEEPSPEED if i == skew else None,
            nccl=SKEW_NCCL if i == skew else NCCL,
            seed=f"{seed}:{i}",
        )
        for i in range(count)
    ]
    return nodes, Plant(slow=host(slow), skew=host(skew))


def nights(count: int, rng: random.Random, seed: int) -> tuple[list[Node], Plant]:
    """`count` nodes over NIGHTS nights ending today, one whose comm bandwidths decline by DECLINE a night."""
    declining = rng.randrange(count)
    last = last_start()
    nodes = [
        Node(
            host(i),
            last - dt.timedelta(days=NIGHTS - 1 - night),
            comm=DECLINE**night if i == declining else 1.0,
            seed=f"{seed}:{i}:{night}",
        )
        for night in range(NIGHTS)
        for i in range(count)
    ]
    return nodes, Plant(declining=host(declining))


@dataclasses.dataclass(frozen=True)
class Measured:
    seconds: float
    peak_mb: float
    cpu_s: float  # user + system of the process tree: the work, whatever else the cores did
    others_cpu_s: float  # what the rest of the machine ran meanwhile: a busy box lengthens `seconds`
    rc: int
    fleet: dict[str, Any]


def _tree_rss(process: psutil.Process) -> int:
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:  # ended between the listing and the reading
            continue
    return total


class PeakRss:
    """The largest summed RSS of a process and its descendants, polled every POLL_S in a thread."""

    def __init__(self, pid: int) -> None:
        self.peak = 0
        self._process = psutil.Process(pid)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done.is_set():
            try:
                self.peak = max(self.peak, _tree_rss(self._process))
            except psutil.Error:  # the process is gone
                return
            self._done.wait(POLL_S)

    def stop(self) -> float:
        """The peak in MB."""
        self._done.set()
        self._thread.join()
        return self.peak / 2**20


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # every waited-for descendant, the readers included
    return usage.ru_utime + usage.ru_stime


def _machine_cpu() -> float:
    """Seconds of CPU the whole machine has run (Linux /proc/stat: user, nice, system, irq, softirq, steal)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        busy = sum(int(fields[i]) for i in (0, 1, 2, 5, 6, 7))
    except (OSError, ValueError, IndexError):
        return 0.0
    return busy / os.sysconf("SC_CLK_TCK")


def measure(args: list[str], out: Path) -> Measured:
    """`ds-doctor fleet ARGS` as a child process: wall seconds, peak MB of its process tree, its CPU seconds and the
    rest of the machine's, its JSON (written to a file: 10,000 nodes' JSON is tens of MB, more than a pipe holds
    while nobody reads it)."""
    cpu, machine = _children_cpu(), _machine_cpu()
    with out.open("w") as stdout:
        started = time.perf_counter()
        child = subprocess.Popen(  # in the case's folder: DuckDB spills past its memory limit into ./.tmp
            [sys.executable, "-m", "ds_doctor.cli", "fleet", *args],
            stdout=stdout,
            stderr=subprocess.DEVNULL,
            cwd=out.parent,
        )
        peak = PeakRss(child.pid)
        try:
            rc = child.wait(FLEET_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            rc = child.wait()
        seconds = time.perf_counter() - started
        peak_mb = peak.stop()
    cpu, machine = _children_cpu() - cpu, _machine_cpu() - machine
    try:
        fleet = json.loads(out.read_text())
    except ValueError:
        fleet = {}
    return Measured(seconds, peak_mb, cpu, max(machine - cpu, 0.0), rc, fleet)


def _named(node: dict[str, Any]) -> bool:
    """A node the fleet view has something to say about."""
    below = any(m.get("below") for m in node.get("measures", []))
    return bool(node.get("failed") or node.get("deviations") or node.get("drifting") or below)


def judge(fleet: dict[str, Any], plant: Plant) -> tuple[bool, int]:
    """(the planted nodes named for what was planted, how many other nodes are named)."""
    nodes = {n["host"]: n for n in fleet.get("nodes", [])}
    named = {name for name, node in nodes.items() if _named(node)}
    if plant.declining:
        drifting = {d["host"] for d in fleet.get("drifts", [])}
        found = plant.declining in drifting
        return found, len((named | drifting) - {plant.declining})
    slow, skew = nodes.get(plant.slow, {}), nodes.get(plant.skew, {})
    below = {m["measure"] for m in slow.get("measures", []) if m.get("below")}
    keys = {d["key"] for d in skew.get("deviations", [])}
    found = below >= set(COMM) and keys >= {"package:deepspeed", "torch.nccl"}
    return found, len(named - {plant.slow, plant.skew})


@dataclasses.dataclass(frozen=True)
class Row:
    label: str
    nodes: int
    nights: int
    files: int
    generate_s: float
    measured: Measured
    found: bool
    false_alarms: int
    cold: bool = False  # read with the files out of the page cache

    @property
    def read(self) -> int:
        return len(self.measured.fleet.get("nodes", []))

    def cells(self) -> str:
        """The columns both tables end with."""
        m = self.measured
        return (
            f"{self.generate_s:.1f} | {m.seconds:.1f} | {m.cpu_s:.1f} | {m.others_cpu_s:.1f} | {m.peak_mb:.0f} | "
            f"{'yes' if self.found else 'no'} | {self.false_alarms} |"
        )


@dataclasses.dataclass(frozen=True)
class Case:
    """One folder to generate and read: its source's kind, how to build its nodes, how to write one, the command's
    options, and its size."""

    source: str
    build: Callable[[], tuple[list[Node], Plant]]
    write: Callable[[Path, Node], None]
    extra: tuple[str, ...]
    nodes: int
    nights: int = 1
    cold: bool = False  # also read it again with its files evicted from the page cache

    @property
    def command(self) -> str:
        return " ".join(["fleet DIR", *self.extra, "--json"])


def evict(root: Path) -> float:
    """Every file under `root` written to disk and dropped from the page cache (theirs only: no other process's
    files, unlike drop_caches), as a morning's fleet run finds the nodes' reports on a disk or a share; the
    seconds it took. Directory entries stay cached."""
    started = time.perf_counter()
    for folder, _, names in os.walk(root):
        for name in names:
            handle = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fdatasync(handle)  # dirty pages are not dropped
                os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(handle)
    return time.perf_counter() - started


def bench(case: Case) -> list[Row]:
    """Generate one case's files in a fresh folder under /tmp, time `fleet` on it (and again from the disk where
    the case says), judge its JSON, remove the folder."""
    nodes, plant = case.build()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ds-doctor-bench-fleet-", dir="/tmp") as tmp:
        root = Path(tmp) / "state"
        generate_s = generate(case.write, root, nodes)
        files = sum(len(found) for _, _, found in os.walk(root))
        for cold in (False, True) if case.cold else (False,):
            if cold:
                print(f"note: {files:,} files evicted from the page cache in {evict(root):.1f} s", flush=True)
            measured = measure([str(root), *case.extra, "--json"], Path(tmp) / "fleet.json")
            found, false_alarms = judge(measured.fleet, plant)
            row = Row(
                case.source, case.nodes, case.nights, files, generate_s, measured, found, false_alarms, cold
            )
            if measured.rc not in (0, 1) or row.read != case.nodes:
                print(
                    f"note: {case.source}: exit {measured.rc}, {row.read:,} node(s) in its JSON", flush=True
                )
            rows.append(row)
    return rows


def night_rows(sizes: Iterable[int], seed: int, cold_at: int | None) -> list[Row]:
    print("\n## One night: `ds-doctor fleet DIR --json`\n", flush=True)
    print(f"| nodes | ms per node | {COMMON} |\n|---:|---:|---:|---:|---:|---:|---:|---|---:|", flush=True)
    rows = []
    for count in sizes:
        build = functools.partial(one_night, count, random.Random(seed + count), seed)
        for row in bench(Case("JSON", build, write_json, (), count, cold=count == cold_at)):
            label = f"{count:,}" + (" (cold cache)" if row.cold else "")
            print(f"| {label} | {row.measured.seconds / count * 1e3:.1f} | {row.cells()}", flush=True)
            rows.append(row)
    return rows


def table_cases(quick: bool, seed: int) -> list[Case]:
    """30 nights of JSON, 30 nights of a table (fewer nodes with --quick), and a one-night 10,000-node table."""
    since = ("--since", "30d")
    table_nodes = QUICK_TABLE_NIGHT_NODES if quick else TABLE_NIGHT_NODES
    json_nights = functools.partial(nights, JSON_NIGHT_NODES, random.Random(seed + 1), seed)
    table_nights = functools.partial(nights, table_nodes, random.Random(seed + 2), seed)
    cases = [
        Case("JSON", json_nights, write_json, since, JSON_NIGHT_NODES, NIGHTS),
        Case("Parquet", table_nights, write_parquet, since, table_nodes, NIGHTS),
    ]
    if not quick:
        one = functools.partial(one_night, TABLE_NODES, random.Random(seed + 3), seed)
        cases.append(Case("Parquet", one, write_parquet, (), TABLE_NODES))
    return cases


def table_rows(quick: bool, seed: int) -> list[Row]:
    print("\n## Across nights, and the results table\n", flush=True)
    print(f"| source | command | nodes x nights | files | {COMMON} |\n|---|---|---:|---:{ALIGN}", flush=True)
    rows = []
    for case in table_cases(quick, seed):
        [row] = bench(case)
        print(
            f"| {case.source} | `{case.command}` | {case.nodes:,} x {case.nights} | {row.files:,} | {row.cells()}",
            flush=True,
        )
        rows.append(row)
    return rows


def verdict(rows: list[Row]) -> None:
    """PASS/MISS for the most nodes, from the page cache and (where measured) from the disk."""
    most = max(r.nodes for r in rows)
    print()
    for row in (r for r in rows if r.nodes == most):
        m = row.measured
        ok = m.seconds <= TARGET_S and m.peak_mb <= TARGET_MB and row.found and not row.false_alarms
        where = "from the disk (cold cache)" if row.cold else "from the page cache"
        print(
            f"{'PASS' if ok else 'MISS'}: {most:,} nodes' reports {where} in {m.seconds:.1f} s (<= {TARGET_S:g}) "
            f"and {m.peak_mb:.0f} MB peak (<= {TARGET_MB:g}), planted found: {'yes' if row.found else 'no'}, "
            f"false alarms: {row.false_alarms}",
            flush=True,
        )


def svg(rows: list[Row]) -> str:
    """The one-night cost curve, seconds and peak MB against nodes (log scale), as two small panels."""
    panels = [
        ("fleet seconds", [r.measured.seconds for r in rows], TARGET_S),
        ("peak MB", [r.measured.peak_mb for r in rows], TARGET_MB),
    ]
    width, height, pad = 300, 200, 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" height="{height}" '
        'font-family="sans-serif" font-size="11">'
    ]
    for offset, (title, values, target) in zip((0, width), panels, strict=True):
        parts += _panel(offset, title, [r.nodes for r in rows], values, target, (width, height, pad))
    return "\n".join([*parts, "</svg>", ""])


def _panel(
    offset: int, title: str, xs: list[int], ys: list[float], target: float, box: tuple[int, int, int]
) -> list[str]:
    import math

    width, height, pad = box
    top = max([*ys, target]) * 1.1
    low, high = math.log10(min(xs)), math.log10(max(xs))

    def at(x: float, y: float) -> tuple[float, float]:
        across = (math.log10(x) - low) / ((high - low) or 1)
        return offset + pad + across * (width - 2 * pad), height - pad - y / top * (height - 2 * pad)

    points = [at(x, y) for x, y in zip(xs, ys, strict=True)]
    _, target_y = at(xs[0], target)
    lines = [
        f'<text x="{offset + pad}" y="16">{title} against nodes (target {target:g})</text>',
        f'<line x1="{offset + pad}" y1="{height - pad}" x2="{offset + width - pad}" y2="{height - pad}" '
        'stroke="black"/>',
        f'<line x1="{offset + pad}" y1="{pad}" x2="{offset + pad}" y2="{height - pad}" stroke="black"/>',
        f'<line x1="{offset + pad}" y1="{target_y:.1f}" x2="{offset + width - pad}" y2="{target_y:.1f}" '
        'stroke="red" stroke-dasharray="4 3"/>',
        '<polyline fill="none" stroke="steelblue" stroke-width="2" points="'
        + " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        + '"/>',
    ]
    for (px, py), x, y in zip(points, xs, ys, strict=True):
        lines += [
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="steelblue"/>',
            f'<text x="{px:.1f}" y="{py - 6:.1f}" text-anchor="middle">{y:.3g}</text>',
            f'<text x="{px:.1f}" y="{height - pad + 14}" text-anchor="middle">{x:,}</text>',
        ]
    return lines


def template_path(given: str | None, keep: Path) -> Path:
    """The report to copy: given, or from $DS_DOCTOR_BENCH_REPORT, else a level-2 run made now into `keep`."""
    given = given or os.environ.get("DS_DOCTOR_BENCH_REPORT")
    if given:
        return Path(given)
    from runs import timed_run

    print("no report given: running `ds-doctor run --level 2` for one (a minute or two)", flush=True)
    seconds, _ = timed_run(["--level", "2"], keep)
    print(f"level 2 ran in {seconds:.0f} s", flush=True)
    return max(keep.glob("ds-doctor-*.json"), key=lambda p: p.stat().st_mtime)


def main(argv: list[str]) -> int:
    global _TEMPLATE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("report", nargs="?", help="a level-2 report JSON to copy")
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 nodes; no 10,000-node table")
    parser.add_argument("--svg", type=Path, help="write the one-night cost curve to this SVG file")
    parser.add_argument("--seed", type=int, default=46)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ds-doctor-bench-template-", dir="/tmp") as keep:
        path = template_path(options.report, Path(keep))
        _TEMPLATE = Template(path)
    print(
        f"template: {path} ({_TEMPLATE.bytes / 1e3:.0f} KB, {len(_TEMPLATE.slots)} compared measures); "
        f"{os.cpu_count()} cores; noise {NOISE:.0%}; slow node comm x {SLOW}, skewed node deepspeed "
        f"{SKEW_DEEPSPEED} and NCCL {SKEW_NCCL}; declining node x {DECLINE} a night",
        flush=True,
    )
    sizes = SIZES[:2] if options.quick else SIZES
    rows = night_rows(sizes, options.seed, None if options.quick else sizes[-1])
    table_rows(options.quick, options.seed)
    verdict(rows)
    if options.svg is not None:
        options.svg.write_text(svg([row for row in rows if not row.cold]))
        print(f"wrote {options.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
