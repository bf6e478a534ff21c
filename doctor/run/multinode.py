"""`ds-doctor run` across the nodes of a job: the same steps as on one node, between two exchanges.

    handshake  every node sends its plan's hash, its ds-doctor version, its environment and hardware; a node
               that disagrees stops the run on every node (exit 2), one that never joins is named
    launch     the cases inside each node (as on one node), then those across the nodes (torchrun's c10d
               rendezvous, every rank's line on every node)
    closing    every node sends its own results; node 0 writes the one report; every node exits with its code

Both exchanges go through a store node 0 hosts at the endpoint for the length of the exchange
(`ds_doctor.cluster.exchange`); the launches across the nodes use torchrun's static rendezvous there (node ranks
given, nothing unpickled). What a node trusts of another's answer is docs/cluster.md's business.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import ds_doctor
from ds_doctor.cluster.exchange import ExchangeError, Refused, exchange
from ds_doctor.cluster.nodes import Cluster
from ds_doctor.hardware.env import collect_environment
from ds_doctor.redact import scrub
from ds_doctor.reports.model import FAILING, CaseResult, Outcome, Report
from ds_doctor.reports.safe import one_line
from ds_doctor.run.build import build_report, utc_now, write_reports_of_run
from ds_doctor.run.pipeline import (
    RunContext,
    RunOptions,
    RunPlan,
    RunReporter,
    SilentReporter,
    announce,
    launch,
    make_plan,
    with_ops,
    write_manifest,
)
from ds_doctor.run.plan import run_node_checks
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


#: What every node's handshake answer holds, and each field's type: an answer without one is not ds-doctor's
HANDSHAKE_FIELDS: dict[str, type] = {
    "node": int,
    "host": str,
    "version": str,
    "plan_hash": str,
    "env": dict,
    "hardware": dict,
}


def malformed(nodes: dict[int, Any]) -> str | None:
    """One line naming each node whose handshake answer is not one ds-doctor of this version would send (a field
    missing or of another type, a failed secret check): nothing else of it is read."""
    odd = []
    for node, said in sorted(nodes.items()):
        if isinstance(said, Refused):
            odd.append(f"node {node}: {said.why}")
            continue
        if not isinstance(said, dict):
            odd.append(f"node {node}: the answer is {type(said).__name__}, not an object")
            continue
        wrong = [
            f"{field} {'missing' if field not in said else f'is {type(said[field]).__name__}, not {kind.__name__}'}"
            for field, kind in HANDSHAKE_FIELDS.items()
            if not isinstance(said.get(field), kind) or isinstance(said.get(field), bool)
        ]
        if not wrong and said["node"] != node:
            wrong.append(f"it says it is node {said['node']}")
        if wrong:
            odd.append(f"node {node}: {', '.join(wrong)}")
    if not odd:
        return None
    return one_line("a node's handshake answer is not ds-doctor's: " + "; ".join(odd))[:2000]


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


def handshake(cluster: Cluster, ctx: RunContext, run_dir: RunDir) -> dict[int, dict[str, Any]]:
    """Every node that joined within the join timeout, with its environment and hardware; a disagreement raises."""
    payload = {
        "node": cluster.node_rank,
        "host": ctx.hardware["host"],
        "version": ds_doctor.__version__,
        "plan_hash": plan_hash(ctx.options, ctx.plan),
        "env": scrub(ctx.env),
        "hardware": scrub(ctx.hardware),
    }
    nodes = exchange(cluster, run_dir, "handshake", payload, cluster.join_timeout_s)
    if cluster.node_rank not in nodes:
        raise ExchangeError(
            f"node {cluster.node_rank} joined the rendezvous at {cluster.endpoint} after node 0 closed the join "
            f"window (--join-timeout {cluster.join_timeout_s:g} s)"
        )
    problem = malformed(nodes) or disagreement(nodes)
    if problem:
        raise ClusterMismatch(problem)
    return nodes


def closing(
    cluster: Cluster, run_dir: RunDir, own: list[CaseResult], wait_s: float
) -> dict[int, list[CaseResult]]:
    """Every node's own results (those inside the node, and its node checks), by node; a node gone is absent."""
    payload = [r.to_dict() for r in own]
    try:
        nodes = exchange(cluster, run_dir, "closing", payload, wait_s)
    except ExchangeError:
        nodes = {cluster.node_rank: payload}
    everyone = {}
    for node, results in nodes.items():
        try:  # an answer that is not a list of results counts as a node that did not answer
            everyone[node] = [CaseResult.from_dict(r) for r in results]
        except (TypeError, ValueError, KeyError, AttributeError):
            continue
    return everyone


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
    started = utc_now()
    options.out_dir.mkdir(parents=True, exist_ok=True)
    env, hardware = collect_environment()
    # no launch is left to exit while the run goes on (`exits`): every node expects the next one in the same order
    ctx = RunContext(options, make_plan(options), reporter or SilentReporter(), env, hardware, started)
    run_dir = RunDir.create(options.out_dir, hardware["host"], started, os.getpid())
    write_manifest(ctx, run_dir)
    # each node's ops built before it joins: a node still building when another starts a launch across the nodes
    # would leave that launch's rendezvous waiting (a build longer than --join-timeout names the node as not joined)
    ctx = dataclasses.replace(ctx, options=with_ops(ctx.plan, run_dir, options, ctx.reporter))
    nodes = handshake(cluster, ctx, run_dir)
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
        return _finish(ctx, run_dir, nodes, joined, {})
    announce(ctx)
    results = launch(ctx, run_dir)
    own = run_node_checks(env, hardware, options.keyword) + [r for r in results if r.nodes == 1]
    across = [r for r in results if r.nodes > 1]
    failed = any(r.outcome in FAILING for r in across)
    everyone = closing(
        cluster,
        run_dir,
        _stamped(own, cluster.node_rank),
        min(CLOSING_AFTER_FAILURE_S, cluster.join_timeout_s) if failed else cluster.join_timeout_s,
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
    return _finish(ctx, run_dir, nodes, gone + across, everyone)


def _finish(
    ctx: RunContext,
    run_dir: RunDir,
    nodes: dict[int, dict[str, Any]],
    results: list[CaseResult],
    everyone: dict[int, list[CaseResult]],
) -> tuple[Report, dict[str, Path]]:
    """The one report of every node's results, written by node 0 (or the lowest node left); the others write
    nothing."""
    options = ctx.options
    cluster = options.cluster
    assert cluster is not None
    by_node = [r for node in sorted(everyone) for r in everyone[node]]
    sections = tuple(
        {"node": n, "host": said["host"], "env": said["env"], "hardware": said["hardware"]}
        for n, said in sorted(nodes.items())
    )
    report = build_report(
        started=ctx.started,
        finished=utc_now(),
        level=options.level,
        argv=options.argv,
        env=ctx.env,
        hardware=ctx.hardware,
        results=by_node + results,
        run_dir=run_dir.path,
        anonymized=options.anonymized,
        nodes=sections,
    )
    return report, write_reports_of_run(report, options.out_dir, run_dir.path) if report_writer(
        report
    ) == cluster.node_rank else {}
