"""The CLI's commands, help, and its one-line usage errors (exit code 2)."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ds_doctor.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["run", "--help"],
        ["list", "--help"],
        ["env", "--help"],
        ["triage", "--help"],
        ["--version"],
    ],
)
def test_help_and_version_exit_zero(capsys, args) -> None:
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and out


def test_list_shows_cases(capsys) -> None:
    code, out, _ = run_cli(capsys, "list", "-k", "z3-opt+param")
    assert code == 0 and "zero_offload[z3-opt+param-bf16-ws2]" in out and "z2-" not in out


def test_env_json_has_no_torch_import() -> None:
    code = (
        "import sys, json, io, contextlib; from ds_doctor.cli import main; buf = io.StringIO();\n"
        "with contextlib.redirect_stdout(buf): rc = main(['env', '--json'])\n"
        "data = json.loads(buf.getvalue()); assert rc == 0 and 'packages' in data['env'], data;\n"
        "assert 'torch' not in sys.modules and 'deepspeed' not in sys.modules, 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_env_says_what_is_absent_in_words_and_shows_what_ds_report_and_collect_env_show(
    capsys, monkeypatch, tmp_path: Path
) -> None:
    """No `None` anywhere; the OS, compilers, /dev/shm, DeepSpeed's op table (installed / compatible / JIT-built) and
    Accelerate's default config, each line in words (docs/env.md lists every row)."""

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    code, out, _ = run_cli(capsys, "env")
    assert code == 0 and not re.search(r"\bNone\b", out), out
    lines = out.splitlines()
    for start in (
        "os: ",
        "cpu: ",
        "/dev/shm: ",
        "compilers: gcc",
        "ninja: ",
        "libaio (DeepSpeed's async_io): ",
    ):
        assert any(line.startswith(start) for line in lines), (start, out)
    assert f"accelerate default config: {tmp_path}/accelerate/default_config.yaml: none: " in out
    if importlib.util.find_spec("deepspeed") is not None:
        assert "| op | installed (pre-compiled) | compatible | JIT-built in |" in lines
        assert any(line.startswith("| cpu_adam | ") for line in lines), out
        assert any(line.startswith("deepspeed accelerator: ") for line in lines)


def test_env_json_carries_the_new_sections_scrubbed(capsys, monkeypatch, tmp_path: Path) -> None:
    (tmp_path / "accelerate").mkdir()
    (tmp_path / "accelerate" / "default_config.yaml").write_text(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
        "hub_token: hf_abcdefghijklmnopqrstuvwxyz0123456789\n"
    )
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    code, out, _ = run_cli(capsys, "env", "--json")
    data = json.loads(out)
    assert code == 0 and {"env", "hardware", "system", "deepspeed", "accelerate_config"} <= set(data)
    config = data["accelerate_config"]
    assert config["found"] and config["config"]["deepspeed_config"] == {"zero_stage": 3}
    assert config["config"]["hub_token"] == "<redacted>" and "hf_abcdefghij" not in out
    assert data["system"]["os"] and "unavailable" in data["system"]
    code, text, _ = run_cli(capsys, "env")
    assert "  deepspeed_config.zero_stage: 3" in text and "  hub_token: <redacted>" in text


def good_report_json() -> str:
    """A valid (empty) report, the other side of the diff cases."""
    from ds_doctor.run.build import build_report, utc_now

    now = utc_now()
    return build_report(
        started=now,
        finished=now,
        level=1,
        argv=(),
        env={"python": "3.11", "packages": {}},
        hardware={"host": "h", "cpus": 1, "memory_bytes": 1, "gpus": []},
        results=[],
        run_dir=None,
    ).to_json()


class _Evil:
    def __reduce__(self) -> tuple:
        import os

        return (os.system, ("touch /tmp/ds-doctor-evil-pickle-ran",))


def make_inputs(tmp: Path) -> None:
    """The files and directories the bad-input table points at."""
    (tmp / "a_file").write_text("x")
    (tmp / "empty.json").write_text("")
    (tmp / "malformed.json").write_text('{"schema_version": 1, "tool": ')
    (tmp / "other.json").write_text(json.dumps({"name": "some other tool", "results": []}))
    (tmp / "newer.json").write_text(
        json.dumps({"schema_version": 99, "tool": {"name": "ds-doctor", "version": "9"}})
    )
    (tmp / "broken-report.json").write_text(
        json.dumps({"schema_version": 1, "tool": {"name": "ds-doctor"}, "results": "not a list"})
    )
    (tmp / "plain_dir").mkdir()
    (tmp / "broken.yaml").write_text("distributed_type: DEEPSPEED\nmixed_precision: [bf16\n")
    (tmp / "tpu.yaml").write_text("distributed_type: TPU\n")
    (tmp / "refused_ds.json").write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": "three"}})
    )
    (tmp / "evil_dumps").mkdir()  # a pickle that would run a command if it were unpickled plainly
    (tmp / "evil_dumps" / "rank_0").write_bytes(pickle.dumps(_Evil()))
    (tmp / "bad_run").mkdir()
    (tmp / "bad_run" / "run.json").write_text("{not json")
    (tmp / "newer_run").mkdir()
    (tmp / "newer_run" / "run.json").write_text(json.dumps({"manifest_version": 7, "planned": []}))
    (tmp / "good.json").write_text(good_report_json())
    (tmp / "gutted_run").mkdir()
    (tmp / "gutted_run" / "run.json").write_text(
        json.dumps(
            {
                "manifest_version": 1,
                "started_at": "2026-11-21T00:00:00Z",
                "level": 2,
                "argv": [],
                "env": {},
                "hardware": {},
                "planned": [{"case": "x[y-ws1]"}],
                "skips": [],
            }
        )
    )


#: (arguments, a word the one-line message must contain); {tmp} is the test's directory, made by make_inputs
BAD_INPUTS = [
    (["run", "--level", "7"], "--level"),
    (["run", "--level", "0"], "--level"),
    (["run", "--level", "abc"], "--level"),
    (["run", "-k", "no_such_case_anywhere"], "zero_offload"),
    (["run", "-k", "(z3"], "-k"),
    (["run", "-k", "z2-opt"], "--level 3"),
    (["run", "--nproc", "0"], "--nproc"),
    (["run", "--nproc", "-1"], "--nproc"),
    (["run", "--nproc", "two"], "--nproc"),
    (["run", "--timeout", "abc"], "--timeout"),
    (["run", "--timeout", "0"], "--timeout"),
    (["run", "--timeout", "-5"], "--timeout"),
    (["run", "--out", "{tmp}/a_file"], "not a directory"),
    (["run", "--out", "{tmp}/a_file/below"], "--out"),
    (["run", "--out", "/proc/ds-doctor-cannot-write-here"], "--out"),
    (["run", "--bogus"], "--bogus"),
    (["frobnicate"], "frobnicate"),
    (["list", "-k", "nothing_matches_this"], "zero_offload"),
    (["triage", "{tmp}/missing.log"], "no such file"),
    (["triage", "{tmp}/plain_dir"], "no Flight Recorder dump in it"),
    (["triage", "{tmp}/evil_dumps"], "holds plain data only"),
    (["triage", "--world-size", "0", "{tmp}/good.json"], "--world-size"),
    (["report", "{tmp}/missing"], "no such file"),
    (["report", "{tmp}/empty.json"], "empty file"),
    (["report", "{tmp}/malformed.json"], "not valid JSON"),
    (["report", "{tmp}/other.json"], "not a ds-doctor report"),
    (["report", "{tmp}/newer.json"], "newer"),
    (["report", "{tmp}/broken-report.json"], "not a valid ds-doctor report"),
    (["report", "{tmp}/plain_dir"], "not a ds-doctor run directory"),
    (["report", "{tmp}/bad_run"], "not valid JSON"),
    (["report", "{tmp}/newer_run"], "newer ds-doctor"),
    (["report", "{tmp}/gutted_run"], "incomplete"),
    (["report", "{tmp}/gutted_run", "--out", "{tmp}/a_file"], "not a directory"),
    (["diff", "{tmp}/missing.json", "{tmp}/good.json"], "no such file"),
    (["diff", "{tmp}/good.json"], "Missing argument"),
    (["diff", "{tmp}/plain_dir", "{tmp}/good.json"], "directory"),
    (["diff", "{tmp}/empty.json", "{tmp}/good.json"], "empty file"),
    (["diff", "{tmp}/good.json", "{tmp}/malformed.json"], "not valid JSON"),
    (["diff", "{tmp}/other.json", "{tmp}/good.json"], "not a ds-doctor report"),
    (["diff", "{tmp}/good.json", "{tmp}/newer.json"], "newer"),
    (["diff", "{tmp}/good.json", "{tmp}/broken-report.json"], "not a valid ds-doctor report"),
    (["diff", "{tmp}/good.json", "{tmp}/good.json", "--tolerance", "100"], "--tolerance"),
    (["diff", "{tmp}/good.json", "{tmp}/good.json", "--tolerance", "-1"], "--tolerance"),
    (["diff", "{tmp}/good.json", "{tmp}/good.json", "--tolerance", "ten"], "--tolerance"),
    (["run", "--level", "1", "--out", "{tmp}/report.md"], "looks like a file name"),
    (["run", "--baseline", "{tmp}/missing.json"], "--baseline"),
    (["run", "--baseline", "{tmp}/malformed.json"], "not valid JSON"),
    (["run", "--baseline", "{tmp}/plain_dir"], "directory"),
    (["run", "--baseline", "{tmp}/good.json", "--tolerance", "150"], "--tolerance"),
    (["run", "--nnodes", "2"], "--nnodes, --node-rank and --rdzv-endpoint together"),
    (
        ["run", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:29400"],
        "--node-rank 2 is not in",
    ),
    (["run", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "host:port"], "--rdzv-endpoint"),
    (["run", "--nnodes", "0", "--node-rank", "0", "--rdzv-endpoint", "h:1"], "--nnodes"),
    (["run", "--join-timeout", "0"], "--join-timeout"),
    (["run", "--suspect-below", "1.5"], "--suspect-below"),
    (["run", "--deepspeed-config", "{tmp}/absent.json"], "no such file"),
    (["run", "--deepspeed-config", "{tmp}/malformed.json"], "not JSON: Expecting value at line 1 column 31"),
    (
        ["run", "--deepspeed-config", "{tmp}/refused_ds.json"],
        "DeepSpeed refuses it: DeepSpeedZeroConfig stage",
    ),
    (
        ["run", "--model", "hf:not_a_model"],
        "not a causal-LM model type of transformers; tested: qwen3, llama",
    ),
    (["run", "--model", "tests.resources.nope:f"], "does not import"),
    (["run", "--model", "tests.resources.user_models:not_a_module"], "not an nn.Module"),
    (["run", "--model", "a model"], "expected hf:<model_type>"),
    (["run", "--accelerate-config", "{tmp}/absent.yaml"], "no such file"),
    (["run", "--freeze", "emb.*"], "--freeze names a part of your model: give --model too"),
    (
        ["run", "--model", "tests.resources.user_models:tied_with_buffers", "--freeze", "nothing.*"],
        "matches no parameter of tests.resources.user_models:tied_with_buffers; its parameters: embed.weight",
    ),
    (["run", "--accelerate-config", "{tmp}/broken.yaml"], "not YAML"),
    (["run", "--accelerate-config", "{tmp}/tpu.yaml"], "distributed_type 'TPU' is none of"),
]


@pytest.mark.parametrize(("args", "needle"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, args, needle) -> None:
    make_inputs(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if args[0] == "run" and "--out" not in args and "--bogus" not in args:
        args += ["--out", str(tmp_path / "out")]
    code, out, err = run_cli(capsys, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("ds-doctor: error:") and needle in err, err
    assert "Traceback" not in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing half-written


@pytest.mark.parametrize("command", ["run", "list"])
@pytest.mark.parametrize(
    ("named", "needle"),
    [
        ("no_such_module_ds_doctor", "does not load: ModuleNotFoundError"),
        ("json", "is not a probe: it needs SPEC"),  # a module that imports, and is no probe
    ],
)
def test_a_probe_the_environment_names_that_does_not_load_is_one_line_exit_2(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, named: str, needle: str
) -> None:
    """DS_DOCTOR_EXTRA_PROBES is the user's input: a module it names that does not load or is no probe was "internal
    error", exit 3; it is one line naming the variable, exit 2, and a run writes nothing."""
    monkeypatch.setenv("DS_DOCTOR_EXTRA_PROBES", named)
    args = [command, *(["--out", str(tmp_path / "out")] if command == "run" else [])]
    code, out, err = run_cli(capsys, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("ds-doctor: error:") and needle in err, err
    assert "fix or unset DS_DOCTOR_EXTRA_PROBES" in err
    assert list(tmp_path.iterdir()) == []


def test_bad_input_table_has_at_least_20_cases() -> None:
    assert len(BAD_INPUTS) >= 20


def test_level_1_writes_an_environment_only_report(capsys, tmp_path: Path) -> None:
    import json

    from ds_doctor.reports.model import validate

    code, out, _ = run_cli(capsys, "run", "--level", "1", "--out", str(tmp_path))
    assert code == 0
    reports = list(tmp_path.glob("ds-doctor-*.json"))
    assert len(reports) == 1 and str(reports[0]) in out.replace("\n", "")
    data = json.loads(reports[0].read_text())
    validate(data)
    assert data["results"] == [] and data["hardware"]["cpus"] and data["env"]["packages"]["ds-doctor"]
    assert (tmp_path / reports[0].name.replace(".json", ".md")).read_text().startswith("# ds-doctor report")


def test_a_missing_transformers_skips_the_accelerate_family_with_the_install_line(tmp_path: Path) -> None:
    """transformers hidden the way Python hides a module (sys.modules entry None): find_spec says missing."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['transformers'] = None\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{shim}:{root}"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ds_doctor.cli",
            "run",
            "--level",
            "3",
            "-k",
            "accelerate_deepspeed",
            "--out",
            str(tmp_path / "out"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout)["results"]
    assert len(results) == 24 and {r["outcome"] for r in results} == {"skip"}
    assert {r["reason"] for r in results} == {"missing optional dependency: pip install transformers"}


def test_the_report_records_the_arguments_main_was_given(capsys, tmp_path: Path) -> None:
    assert main(["run", "--level", "1", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    data = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert data["command"] == ["ds-doctor", "run", "--level", "1", "--out", str(tmp_path)]


def test_debug_travels_in_the_context_and_shows_the_traceback(capsys, tmp_path: Path, monkeypatch) -> None:
    from ds_doctor.run import pipeline

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the doctor itself broke")

    monkeypatch.setattr(pipeline, "run", broken)
    assert main(["run", "--level", "1", "--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert (
        err.strip() == "ds-doctor: internal error: RuntimeError: the doctor itself broke (rerun with --debug)"
    )
    assert main(["--debug", "run", "--level", "1", "--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().endswith("(rerun with --debug)")


def test_srun_variables_that_do_not_make_a_cluster_are_one_line(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SLURM_NNODES", "3")
    monkeypatch.setenv("SLURM_NODEID", "0")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[01-02]")
    code, _, err = run_cli(capsys, "run", "--out", str(tmp_path / "out"))
    assert code == 2 and err.strip() == (
        "ds-doctor: error: SLURM_JOB_NODELIST 'gpu[01-02]' names 2 hosts, SLURM_NNODES says 3"
    )
    assert not (tmp_path / "out").exists()


def test_the_neighbours_spellings_work(capsys, tmp_path: Path) -> None:
    """torchrun's --nproc-per-node (and its underscore form) and pytest's --junitxml, beside ds-doctor's own names."""
    for spelling in ("--nproc-per-node", "--nproc_per_node"):
        junit = tmp_path / f"{spelling}.xml"
        code = main(
            ["run", "--level", "1", spelling, "2", "--junitxml", str(junit), "--out", str(tmp_path / "r")]
        )
        assert code == 0 and junit.read_text().startswith("<?xml"), capsys.readouterr().err


def test_list_piped_is_one_plain_line_per_case(capsys) -> None:
    code, out, _ = run_cli(capsys, "list", "-k", "zero_offload and z3-opt+param")
    assert code == 0 and "zero_offload[z3-opt+param-bf16-ws2] S2 level2 ws2" in out.splitlines()
    assert "┃" not in out and "│" not in out and "━" not in out


def test_a_stopped_run_exits_as_shells_say_and_reports_what_finished(tmp_path: Path) -> None:
    """A real SIGINT (a shell's Ctrl-C) to a running `ds-doctor run` of DeepSpeed's cases, once its first case
    finished: exit 128 + the signal, the launch stopped, and the report of the finished case written, the unfinished
    one marked. SIGTERM (`timeout`, a CI job's time limit: on an H100 a `timeout`-bounded level-3 run ended with no
    report) and SIGHUP are test_e2e's stopped run, which makes the same checks and the one for leftover processes
    (SIGTERM was parametrized here too: a second launch of the same checks)."""
    import signal
    import time

    signame = "SIGINT"
    signum = getattr(signal, signame)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ds_doctor.cli",
            "run",
            "--level",
            "3",
            "-k",
            "zero_offload and (z1-none-fp32-ws1 or z3-opt-fp32-ws1)",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a job in the background of a non-interactive shell (make test runs one so) ignores SIGINT, and its
        # children inherit that: a terminal's Ctrl-C is what is tested, so the default disposition is restored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while (
            time.monotonic() < deadline
            and proc.poll() is None
            and not any(path.stat().st_size for path in tmp_path.glob("run-*/ws1-*/rank0.jsonl"))
        ):
            time.sleep(0.1)  # the first case has finished, the second is under way
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, err[-2000:]
    # one closing line: how far the run got and where its report is ("aborted" no more after it)
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(f"ds-doctor: stopped by {signame} after 1 of 2 cases: 1 not run")
    )
    assert "aborted" not in err
    (report_file,) = tmp_path.glob("*-interrupted.json")
    data = json.loads(report_file.read_text())
    outcomes = {r["case"]: r["outcome"] for r in data["results"]}
    assert outcomes["zero_offload[z1-none-fp32-ws1]"] == "pass", outcomes
    assert outcomes["zero_offload[z3-opt-fp32-ws1]"] == "not_run", outcomes  # never finished, and said so
    assert data["stopped"] == {"signal": signame, "finished": 1, "planned": 2}
    time.sleep(1.0)  # PR_SET_PDEATHSIG's SIGTERM is delivered as the doctor exits; allow the ranks to go
    left = [
        p.pid for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or ())
    ]
    assert not left, f"launch processes outlived the run: {left}"


def test_out_means_a_folder_everywhere_and_a_file_where_one_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`run --out` and `report --out` name the folder the reports go into; `diff --out` and `fleet --out` take a file
    or, the same way, a folder (the file named for them); a file-like name given where a folder is meant is refused in
    one line instead of becoming a folder called `report.md`."""
    report = tmp_path / "ds-doctor-h-20261126T000000Z.json"
    report.write_text(good_report_json())
    folder = tmp_path / "into"
    folder.mkdir()
    assert run_cli(capsys, "diff", str(report), str(report), "--out", str(folder))[0] == 0
    assert (folder / "ds-doctor-h-20261126T000000Z.diff.md").read_text().strip()
    assert run_cli(capsys, "fleet", str(report), "--out", str(folder))[0] == 0
    assert "h" in (folder / "ds-doctor-fleet.md").read_text()
    assert run_cli(capsys, "diff", str(report), str(report), "--out", str(tmp_path / "d.md"))[0] == 0
    assert (tmp_path / "d.md").exists()
    for command in (["report", str(report)], ["run", "--level", "1"]):
        code, _, err = run_cli(capsys, *command, "--out", str(tmp_path / "mine.md"))
        assert (
            code == 2 and "looks like a file name; --out is the folder" in err and len(err.splitlines()) == 1
        )
        assert not (tmp_path / "mine.md").exists()
    code, _, _ = run_cli(capsys, "report", str(report), "--out", str(tmp_path / "reports"))
    assert code == 0 and len(list((tmp_path / "reports").glob("*-report.*"))) == 3
