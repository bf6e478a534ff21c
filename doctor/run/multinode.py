"""`ds-doctor run` across the nodes of a job: the same steps as on one node, between two exchanges.

    handshake  every node sends its plan's hash, its ds-doctor version, its environment and hardware; a node
               that disagrees stops the run on every node (exit 2), one that never joins is named
    launch     the cases inside each node (as on one node), then those across the nodes (torchrun's c10d
               rendezvous, every rank's line on every node)
    closing    every node sends its own results; node 0 writes the one report; every node exits with its code

Both exchanges are torchrun launches of one rank per node (`ds_doctor.cluster.exchange`): no protocol of ds-doctor's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import ds_doctor
from ds_doctor.cluster.exchange import ExchangeError, exchange
from ds_doctor.cluster.nodes import Cluster
from ds_doctor.hardware.env import collect_environment
from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.redact import scrub
from ds_doctor.reports.records import FAILING, CaseResult, Outcome, Report
from ds_doctor.run.build import build_report, utc_now, write_reports_of_run
from ds_doctor.run.launch import rank_environment
from ds_doctor.run.pipeline import (
    RunOptions,
    RunPlan,
    RunReporter,
    SilentReporter,
    launch,
    make_plan,
    write_manifest,
)
from ds_doctor.run.plan import node_checks
from ds_doctor.rundir import RunDir

#: After a failure across the nodes, how long the closing exchange waits for a node that may be gone (at most as
#: long as a node was given to join: --join-timeout).
CLOSING_AFTER_FAILURE_S = 30.0


class ClusterMismatch(Exception):
    """The nodes do not agree on what to run (other -k, --level, --nproc, or ds-doctor version): one line, exit 2."""


def plan_hash(options: RunOptions, run_plan: RunPlan) -> str:
    """What every node must agree on: the options that choose cases and the launches across the nodes (the cases
    inside one node may differ with its GPUs and packages)."""
    across = [(g.name, g.backend, [c.id for c in g.cases]) for g in run_plan.groups if g.nodes > 1]
    inputs = {
        "level": options.level,
        "keyword": options.keyword,
        "nproc": options.nproc,
        "timeout": options.timeout_s,
        "across": across,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def disagreement(nodes: dict[int, dict[str, Any]]) -> str | None:
    """One line naming the nodes whose plan or version differ from node 0's (or the first to answer)."""
    first = min(nodes)
    reference = nodes[first]
    odd = []
    for node, said in sorted(nodes.items()):
        what = []
        if said["version"] != reference["version"]:
            what.append(f"ds-doctor {said['version']} (node {first} has {reference['version']})")
        if said["plan_hash"] != reference["plan_hash"]:
            what.append(
                f"plan {said['plan_hash']} (node {first} has {reference['plan_hash']}: "
                "other -k, --level, --nproc or --timeout?)"
            )
        if what:
            odd.append(f"node {node} ({said['host']}): " + ", ".join(what))
    return "the nodes disagree on what to run: " + "; ".join(odd) if odd else None


def cluster_result(node: int, reason: str) -> CaseResult:
    """A node that never joined or stopped answering, as a failing result naming it."""
    return CaseResult(
        probe="cluster",
        case=f"cluster[node{node}]",
        scenario="smoke",
        level=1,
        world_size=1,
        device_kind="cpu",
        outcome=Outcome.ERROR,
        duration_s=0.0,
        reason=reason,
        node=node,
    )


def handshake(
    cluster: Cluster,
    run_dir: RunDir,
    options: RunOptions,
    run_plan: RunPlan,
    env: dict[str, Any],
    hardware: dict[str, Any],
) -> dict[int, dict[str, Any]]:
    """Every node that joined within the join timeout, with its environment and hardware; a disagreement raises."""
    payload = {
        "node": cluster.node_rank,
        "host": hardware["host"],
        "version": ds_doctor.__version__,
        "plan_hash": plan_hash(options, run_plan),
        "env": scrub(env),
        "hardware": scrub(hardware),
    }
    nodes = exchange(
        cluster,
        run_dir,
        "handshake",
        payload,
        cluster.join_timeout_s,
        rank_environment(options.rank, cluster, across=True),
    )
    problem = disagreement(nodes)
    if problem:
        raise ClusterMismatch(problem)
    return nodes


def closing(
    cluster: Cluster, run_dir: RunDir, own: list[CaseResult], wait_s: float, rank_options: RankOptions
) -> dict[int, list[CaseResult]]:
    """Every node's own results (those inside the node, and its node checks), by node; a node gone is absent."""
    payload = [r.to_dict() for r in own]
    try:
        nodes = exchange(
            cluster, run_dir, "closing", payload, wait_s, rank_environment(rank_options, cluster, across=True)
        )
    except ExchangeError:
        nodes = {cluster.node_rank: payload}
    return {node: [CaseResult.from_dict(r) for r in results] for node, results in nodes.items()}


def report_writer(report: Report) -> int:
    """The node that writes the one report: node 0, or the lowest node still answering when node 0 is gone."""
    gone = {r.node for r in report.results if r.probe == "cluster"}
    return min(section.node for section in report.nodes if section.node not in gone)


def _stamped(results: list[CaseResult], node: int) -> list[CaseResult]:
    return [dataclasses.replace(r, node=node) if r.nodes == 1 else r for r in results]


def run(options: RunOptions, reporter: RunReporter | None = None) -> tuple[Report, dict[str, Path]]:
    """The run across the nodes; one node writes the report (the paths are empty on the others)."""
    cluster = options.cluster
    assert cluster is not None
    reporter = reporter or SilentReporter()
    started = utc_now()
    options.out_dir.mkdir(parents=True, exist_ok=True)
    env, hardware = collect_environment()
    run_plan = make_plan(options)
    run_dir = RunDir.create(options.out_dir, hardware["host"], started, os.getpid())
    write_manifest(run_dir, run_plan, options, started, env, hardware)
    nodes = handshake(cluster, run_dir, options, run_plan, env, hardware)
    missing = [n for n in range(cluster.nnodes) if n not in nodes]
    if missing:  # no launch across the nodes can happen: say who never came
        joined = [
            cluster_result(
                n,
                f"node {n} did not join within --join-timeout {cluster.join_timeout_s:g} s "
                f"(the rendezvous at {cluster.endpoint}); nothing ran",
            )
            for n in missing
        ]
        return _finish(options, run_dir, started, env, hardware, nodes, joined, {})
    reporter.planned(
        len(run_plan.planned),
        run_plan.hardware.device_kind if run_plan.hardware else "-",
        run_plan.nproc,
        len(run_plan.skips),
    )
    results = launch(run_plan, run_dir, env["packages"], options, reporter, hardware["host"])
    own = node_checks(env, hardware, options.keyword) + [r for r in results if r.nodes == 1]
    across = [r for r in results if r.nodes > 1]
    failed = any(r.outcome in FAILING for r in across)
    everyone = closing(
        cluster,
        run_dir,
        _stamped(own, cluster.node_rank),
        min(CLOSING_AFTER_FAILURE_S, cluster.join_timeout_s) if failed else cluster.join_timeout_s,
        options.rank,
    )
    gone = [
        cluster_result(
            n,
            f"node {n} ({nodes[n]['host']}) did not answer the closing exchange: "
            "its results are missing from this report (did it stop, or get killed?)",
        )
        for n in sorted(nodes)
        if n not in everyone
    ]
    return _finish(options, run_dir, started, env, hardware, nodes, gone + across, everyone)


def _finish(
    options: RunOptions,
    run_dir: RunDir,
    started: Any,
    env: dict[str, Any],
    hardware: dict[str, Any],
    nodes: dict[int, dict[str, Any]],
    results: list[CaseResult],
    everyone: dict[int, list[CaseResult]],
) -> tuple[Report, dict[str, Path]]:
    """The one report of every node's results, written by node 0 (or the lowest node left); the others write
    nothing."""
    cluster = options.cluster
    assert cluster is not None
    by_node = [r for node in sorted(everyone) for r in everyone[node]]
    sections = tuple(
        {"node": n, "host": said["host"], "env": said["env"], "hardware": said["hardware"]}
        for n, said in sorted(nodes.items())
    )
    report = build_report(
        started=started,
        finished=utc_now(),
        level=options.level,
        argv=options.argv,
        env=env,
        hardware=hardware,
        results=by_node + results,
        run_dir=run_dir.path,
        anonymized=options.anonymized,
        nodes=sections,
    )
    return report, write_reports_of_run(report, options.out_dir, run_dir.path) if report_writer(
        report
    ) == cluster.node_rank else {}
