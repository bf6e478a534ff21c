"""contrib/prometheus/ds-doctor.rules.yml, run by Prometheus's own `promtool test rules` on series that ds-doctor's
Prometheus writer wrote for two nodes: each alert fires on the bad node, and on nothing else (promtool fails a
test on any alert it did not expect). contrib/grafana/ds-doctor.json: valid JSON whose queries name only metrics
the writer emits."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ds_doctor.checks.health import health_results
from ds_doctor.hardware.nvml import read_gpus
from ds_doctor.reports.model import CaseResult, Outcome, Report
from ds_doctor.reports.prometheus import render_prometheus
from ds_doctor.run.build import build_report
from tests.hardware.test_nvml import AnsweringNVML, answers
from tests.reports.samples import case

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "contrib" / "prometheus" / "ds-doctor.rules.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "ds-doctor.json"
PROMTOOL = shutil.which("promtool")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)  # promtool's tests start their clock at 0...
EVAL = dt.timedelta(minutes=30)  # ...so the runs' start times lie before it (a gauge may be negative)
MINUTES = int(EVAL.total_seconds() // 60) + 30
COMM = "comm[all_reduce-ws8]"
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian: apt install prometheus)"
)


def comm(outcome: Outcome, busbw: float) -> CaseResult:
    return case(
        outcome,
        "all_reduce",
        probe="comm",
        world_size=8,
        measures={"busbw_gbps": busbw, "algbw_gbps": busbw / 1.75},
        reason="rank 3 got 2.0 where 1.0 was sent" if outcome == Outcome.FAIL else None,
    )


def compute(tflops: float) -> CaseResult:
    return case(Outcome.PASS, "matmul-bf16", probe="compute", measures={"tflops": tflops})


def node_report(host: str, recording: str, comm_case: CaseResult, started: dt.datetime) -> Report:
    gpus, reason, drivers = read_gpus(AnsweringNVML(answers(recording)))
    env = {"python": "3.11", "packages": {"deepspeed": "0.17.6"}, **drivers}
    hardware = {"host": host, "cpus": 2, "memory_bytes": 1 << 30, "gpus": gpus}
    return build_report(
        started=started,
        finished=started + dt.timedelta(minutes=5),
        level=2,
        argv=("run",),
        env=env,
        hardware=hardware,
        results=[*health_results(gpus, reason), comm_case, compute(700.0)],
        run_dir=None,
    )


def textfiles() -> dict[str, str]:
    """Each node's textfile as `run --prometheus --baseline B --tolerance 10` writes it: the good node ran two hours
    before the evaluation, as fast as its baseline, healthy; the bad node 40 hours before, half its baseline's
    bandwidth, one failing case, the sick H100 node's NVML readings."""
    now = EPOCH + EVAL
    good = node_report(
        "node-good", "h100_x1_firecracker.json", comm(Outcome.PASS, 100.0), now - dt.timedelta(hours=2)
    )
    bad = node_report(
        "node-bad", "h100_node_sick.json", comm(Outcome.FAIL, 50.0), now - dt.timedelta(hours=40)
    )
    baseline = node_report(
        "base", "h100_x1_firecracker.json", comm(Outcome.PASS, 100.0), now - dt.timedelta(days=7)
    )
    return {report.hardware.host: render_prometheus(report, baseline, 10.0) for report in (good, bad)}


def _value(number: float) -> str:
    return format(number, "f")  # promtool's series notation reads no exponent before its `+0x`


def input_series(texts: dict[str, str]) -> list[dict[str, str]]:
    """Every sample of every textfile as promtool input, constant over the test, with the labels a node_exporter
    scrape adds (`instance`, `job`)."""
    series = []
    for host, text in texts.items():
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = {**sample.labels, "instance": f"{host}:9100", "job": "node"}
                selector = ",".join(f"{name}={json.dumps(value)}" for name, value in sorted(labels.items()))
                series.append(
                    {
                        "series": f"{sample.name}{{{selector}}}",
                        "values": f"{_value(sample.value)}+0x{MINUTES}",
                    }
                )
    return series


def scraped(host: str, **labels: str) -> dict[str, str]:
    return {"host": host, "instance": f"{host}:9100", "job": "node", **labels}


def expected_alerts(bad_health: list[tuple[str, str]]) -> dict[str, list[dict[str, str]]]:
    """What fires at the evaluation, all of it on the bad node (promtool fails on anything more or less)."""
    return {
        "DsDoctorCaseFailed": [
            scraped("node-bad", probe="comm", case=COMM, outcome="fail", severity="warning")
        ],
        "DsDoctorGpuHealthFail": [
            scraped("node-bad", gpu=gpu, rule=rule, severity="critical") for gpu, rule in bad_health
        ],
        "DsDoctorBelowBaseline": [
            scraped("node-bad", probe="comm", case=COMM, measure=measure, severity="warning")
            for measure in ("algbw_gbps", "busbw_gbps")
        ],
        "DsDoctorStale": [scraped("node-bad", severity="warning")],
    }


def sick_node_health() -> list[tuple[str, str]]:
    """(GPU case, rule) of every error finding NVML's recorded readings of the sick node give."""
    gpus, reason, _ = read_gpus(AnsweringNVML(answers("h100_node_sick.json")))
    return [(r.key, f.invariant) for r in health_results(gpus, reason) for f in r.findings if f.is_error]


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@needs_promtool
def test_the_rules_are_valid() -> None:
    proc = promtool("check", "rules", str(RULES), cwd=ROOT)
    assert proc.returncode == 0 and "SUCCESS: 4 rules found" in proc.stdout, proc.stdout + proc.stderr


@needs_promtool
def test_each_alert_fires_on_the_bad_node_only(tmp_path: Path) -> None:
    health = sick_node_health()
    assert len(health) >= 2  # the recording has more than one GPU with an error rule: each is its own alert
    alerts = expected_alerts(health)
    tests = [
        {
            "alertname": name,
            "eval_time": f"{int(EVAL.total_seconds())}s",
            "exp_alerts": [{"exp_labels": labels} for labels in expected],
        }
        for name, expected in alerts.items()
    ]
    # annotations are checked by `check rules`; here what fires, exactly
    rules = yaml.safe_load(RULES.read_text())
    for rule in rules["groups"][0]["rules"]:
        rule.pop("annotations")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    spec = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series(textfiles()), "alert_rule_test": tests}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, width=1 << 16))
    proc = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-4000:]


@needs_promtool
def test_a_rule_that_cannot_fire_is_caught(tmp_path: Path) -> None:
    """The harness fails where an expected alert does not fire: the test above could not pass with a dead rule."""
    rules = yaml.safe_load(RULES.read_text())
    stale = next(r for r in rules["groups"][0]["rules"] if r["alert"] == "DsDoctorStale")
    stale["expr"] = "time() - ds_doctor_run_start_timestamp_seconds > 100 * 86400"
    stale.pop("annotations")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [stale]}]}))
    spec = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(textfiles()),
                "alert_rule_test": [
                    {
                        "alertname": "DsDoctorStale",
                        "eval_time": f"{int(EVAL.total_seconds())}s",
                        "exp_alerts": [{"exp_labels": scraped("node-bad", severity="warning")}],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, width=1 << 16))
    proc = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert proc.returncode != 0 and "DsDoctorStale" in proc.stdout + proc.stderr


def emitted_metrics() -> set[str]:
    return {family.name for text in textfiles().values() for family in text_string_to_metric_families(text)}


def test_the_writer_emits_every_metric_the_rules_read() -> None:
    """Also without promtool: each metric a rule's expression names is one the writer emits."""
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    named = {name for rule in rules for name in re.findall(r"\bds_doctor_[a-z_]+", rule["expr"])}
    assert named and named <= emitted_metrics(), named - emitted_metrics()


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    return exprs + [
        var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        for var in dashboard["templating"]["list"]
        if var["type"] == "query"
    ]


@needs_promtool
def test_the_dashboard_queries_parse_as_promql(tmp_path: Path) -> None:
    """Each panel's query, `$host` given a value, as a recording rule: `promtool check rules` parses it."""
    exprs = [e.replace("$host", ".*") for e in dashboard_queries() if not e.startswith("label_values(")]
    rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    (tmp_path / "dashboard.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    proc = promtool("check", "rules", "dashboard.yml", cwd=tmp_path)
    assert proc.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in proc.stdout, (
        proc.stdout + proc.stderr
    )


def test_the_dashboard_queries_only_metrics_the_writer_emits() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = dashboard_queries()
    named = {name for expr in exprs for name in re.findall(r"\bds_doctor_[a-z_]+", expr)}
    assert len(exprs) >= 6 and all(re.search(r"\bds_doctor_", e) for e in exprs), exprs
    assert named <= emitted_metrics(), named - emitted_metrics()
    assert {
        "ds_doctor_case_outcome",
        "ds_doctor_gpu_health_finding",
        "ds_doctor_busbw_gbps",
        "ds_doctor_tflops",
        "ds_doctor_measure_baseline_ratio",
        "ds_doctor_run_start_timestamp_seconds",
    } <= named
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_the_ratios_to_the_baseline_are_what_the_rules_compare() -> None:
    samples = {
        host: {
            (s.name, s.labels.get("measure")): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }
        for host, text in textfiles().items()
    }
    assert samples["node-bad"][("ds_doctor_measure_baseline_ratio", "busbw_gbps")] == 0.5
    assert samples["node-good"][("ds_doctor_measure_baseline_ratio", "busbw_gbps")] == 1.0
    assert samples["node-good"][("ds_doctor_measure_baseline_ratio", "tflops")] == 1.0
    assert samples["node-bad"][("ds_doctor_baseline_tolerance_percent", None)] == 10.0


def test_run_with_a_baseline_exports_its_tolerance(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`run --baseline B --tolerance T --prometheus P` (the nightly wrapper's call) carries T into the textfile;
    without a baseline there is no baseline series (and nothing for DsDoctorBelowBaseline to compare)."""
    from ds_doctor.cli import main

    prom = tmp_path / "ds_doctor.prom"
    assert main(["run", "--level", "1", "--out", str(tmp_path), "--prometheus", str(prom)]) == 0
    assert "ds_doctor_baseline_tolerance_percent" not in prom.read_text()
    (baseline,) = tmp_path.glob("ds-doctor-*.json")
    assert (
        main(
            [
                "run",
                "--level",
                "1",
                "--out",
                str(tmp_path / "again"),
                "--prometheus",
                str(prom),
                "--baseline",
                str(baseline),
                "--tolerance",
                "7.5",
            ]
        )
        == 0
    )
    (tolerance,) = [
        s
        for f in text_string_to_metric_families(prom.read_text())
        for s in f.samples
        if s.name == "ds_doctor_baseline_tolerance_percent"
    ]
    assert tolerance.value == 7.5
    capsys.readouterr()
