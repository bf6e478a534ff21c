"""Triage of logs as they reach a ticket: the captured tracebacks of tests/resources/triage wrapped at 80 columns,
prefixed by rank, interleaved with another rank's traceback, glued onto a progress bar; and logs that name other
versions than the installed ones."""

from __future__ import annotations

import random
import re
import textwrap
import time
from pathlib import Path

import pytest

from ds_doctor.knowledge.logtext import log_version_lists, log_versions, normalise
from ds_doctor.knowledge.matching import classify
from ds_doctor.knowledge.triage import read_log, triage
from ds_doctor.reports.model import Verdict
from tests.bounds import GENEROUS_S
from tests.knowledge.test_triage import EXPECTED, TRACES, VERSIONS

S2 = (Path(__file__).resolve().parents[1] / "resources" / "ds_5538_unscale_and_clip.txt").read_text()


def wrapped(text: str, width: int = 80) -> str:
    """As a terminal or a CI log viewer shows it: every line cut at exactly `width` columns."""
    return "\n".join(
        line[i : i + width] for line in text.splitlines() for i in range(0, max(len(line), 1), width)
    )


def prefixed(text: str, rank: int, style: str = "[rank{r}]: ") -> str:
    return "\n".join(style.format(r=rank) + line for line in text.splitlines())


def interleaved(first: str, second: str) -> str:
    a, b = first.splitlines(), second.splitlines()
    out = []
    for i in range(max(len(a), len(b))):
        out += a[i : i + 1] + b[i : i + 1]
    return "\n".join(out)


OTHER = (TRACES / "s0_real_scheduler.txt").read_text()  # a second rank's traceback to interleave with

COPIES = {
    "wrapped": lambda t: wrapped(t),
    "torchrun --tee prefix": lambda t: prefixed(t, 1),
    "srun --label prefix": lambda t: prefixed(t, 3, "{r}: "),
    "pdsh host prefix": lambda t: prefixed(t, 5, "gpu-node-{r}: "),
    "pdsh host and torchrun rank prefixes": lambda t: prefixed(prefixed(t, 1), 0, "worker-{r}: "),
    "interleaved with another rank": lambda t: interleaved(prefixed(OTHER, 0), prefixed(t, 1)),
    "wrapped and prefixed": lambda t: wrapped(prefixed(t, 2, "[default{r}]:")),
    "glued onto a progress bar": lambda t: (
        " 37%|███▋      | 37/100 [00:12<00:21,  2.95it/s]" + t.replace("\n", "\r\n")
    ),
    "colour codes": lambda t: "\x1b[31m" + t.replace("\n", "\x1b[0m\n", 3),
}


@pytest.mark.parametrize("copy", sorted(COPIES))
@pytest.mark.parametrize(("name", "issue_id"), sorted(EXPECTED.items()))
def test_every_captured_trace_survives_what_a_log_does_to_it(name: str, issue_id: str, copy: str) -> None:
    text = COPIES[copy]((TRACES / name).read_text())
    ids = [m.issue.id for m in triage(text, VERSIONS)]
    if copy == "interleaved with another rank":
        assert ids[ids.index(issue_id) if issue_id in ids else 0] == issue_id
        assert "acc_ds_scheduler_defined_twice" in ids  # the other rank's issue is found as well
    else:
        assert ids == [issue_id], copy


def test_normalise_leaves_an_unwrapped_log_alone() -> None:
    text = "epoch 1\n" + "x" * 90 + "\n" + "y" * 70 + '\nTraceback (most recent call last):\n  File "a.py"'
    assert normalise(text) == text


def test_the_s2_traceback_wrapped_at_80_still_names_its_issue() -> None:
    assert classify(wrapped(S2)) == []  # what triage missed before it normalised
    assert [m.issue.id for m in triage(wrapped(S2), VERSIONS)] == ["ds_z3_offload_gradnorm_device_mismatch"]


# a versioned package path
@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("deepspeed==0.14.2", "0.14.2"),  # pip freeze
        ("deepspeed                 0.14.2", "0.14.2"),  # pip list
        ("Name: deepspeed\nVersion: 0.14.2", "0.14.2"),  # pip show
        ("deepspeed info ................... 0.14.2, unknown, unknown", "0.14.2"),  # ds_report
        ("- DeepSpeed version: 0.14.2", "0.14.2"),  # transformers-cli env
        (
            '  File "/opt/conda/lib/python3.10/site-packages/deepspeed-0.14.2-py3.10.egg/deepspeed/runtime/engine.py"',
            "0.14.2",
        ),
        # versions as real tickets write them in prose and issue templates (issue 24)
        ("I am on deepspeed (0.14.2) with 8 GPUs", "0.14.2"),
        ("pip install deepspeed=0.17.6 then train", "0.17.6"),
        ("DeepSpeed version: 0.14.2", "0.14.2"),
        ("Since upgrading to DeepSpeed 0.16.4, training crashes.", "0.16.4"),
        ("[pip3] deepspeed==0.15.1", "0.15.1"),  # python -m torch.utils.collect_env
        ("It worked with deepspeed v0.14.0.", "0.14.0"),
    ],
)
def test_the_log_says_which_deepspeed_it_ran(line: str, version: str) -> None:
    assert log_versions(line, ["deepspeed"]) == {"deepspeed": version}


def test_verdicts_follow_the_versions_the_log_shows_not_the_installed_ones() -> None:
    log = "deepspeed==0.14.2\ntorch==2.3.0\n" + S2
    reading = read_log(log, {"deepspeed": "0.19.8", "torch": "2.13.0"})
    match = reading.matches[0]
    assert (
        match.issue.id == "ds_z3_offload_gradnorm_device_mismatch" and match.issue.verdict == Verdict.AFFECTED
    )
    assert (match.version.version, match.version.source) == ("0.14.2", "the log")
    # the same traceback with no version in it is judged on this machine's deepspeed, and says so
    plain = read_log(S2, {"deepspeed": "0.19.8"}).matches[0]
    assert plain.issue.verdict == Verdict.NOT_AFFECTED and plain.version.source == "this machine"


def test_prodigy_named_with_a_v_and_a_resume_mismatch_is_triaged() -> None:
    log = textwrap.dedent("""\
        Using prodigy-plus-schedule-free v1.8.51
        accelerator.load_state('checkpoints/step_2000')
        Traceback (most recent call last):
          File "/home/u/train.py", line 311, in <module>
            optimizer.step()
          File "/home/u/.venv/lib/python3.11/site-packages/prodigyplus/core_optimiser.py", line 402, in step
            self.update_d_stats(group)
        RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
        """)
    match = read_log(log, {"prodigy-plus-schedule-free": "2.0.1"}).matches[0]
    assert match.issue.id == "prodigy_group_tensors_left_on_cpu"
    assert match.version.version == "1.8.51" and match.issue.verdict == Verdict.AFFECTED
    assert match.line == "Expected all tensors to be on the same device"  # the span, not its whole line


# the bar alone, every piece of it unbounded (the bounded one stops at lengths these texts never reach)
_BAR_ALONE = re.compile(r"\d{1,3}%\|[^|\n]*\|\s*[\d.]+[kMG]?/[\d.?]+[kMG]?\s*\[[^\]\n]*\]")


def test_bars_are_stripped_in_linear_time_and_their_descriptions_kept() -> None:
    """A bar goes and what follows it starts a line; the text before it on its line (its description) stays. The
    regex has no leading `[^\\n]*?` (tried from every position of a line: 20 KB took 4 s, 80 KB 57 s)."""
    from ds_doctor.knowledge.logtext import _strip_bars

    pieces = [
        " 37%|███▋      | 37/100 [00:12<00:21,  2.95it/s]",
        "5%|",
        "|",
        "\n",
        "Traceback",
        " 1/2 [",
        "]",
        "x",
        "\r",
    ]
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        assert _strip_bars(text) == _BAR_ALONE.sub("\n", text.replace("\r\n", "\n").replace("\r", "\n")), (
            repr(text)
        )
    for unit in ("#", " ", "[rank0]: ", "1%||1/1[", "\r 45%|####   | 450/1000 [00:01<00:02]"):
        start = time.monotonic()
        normalise(unit * (2**20 // len(unit)))
        assert time.monotonic() - start < GENEROUS_S, unit  # the old bar regex: 57 s on 80 KB, hours on 1 MB


# an informal name
@pytest.mark.parametrize(
    ("text", "package", "version"),
    [
        ("Using prodigy plus v1.8.51 with accelerate", "prodigy-plus-schedule-free", "1.8.51"),
        ("prodigyplus 1.8.51", "prodigy-plus-schedule-free", "1.8.51"),  # the import name
        (
            "[conda] pytorch                   2.3.0           py3.10_cuda12.1_cudnn8.9.2_0    pytorch",
            "torch",
            "2.3.0",
        ),
        ("The bug shows with transformers 4.45.2, not with 4.46.", "transformers", "4.45.2"),
        # how held-out tickets wrote it (issue 36)
        ("I use V0.14.3 of DeepSpeed on 8 A100s", "deepspeed", "0.14.3"),
        ("DeepSpeed version: V0.14.3", "deepspeed", "0.14.3"),
        ("deepspeed: v0.14.3", "deepspeed", "0.14.3"),
        ("Deepspeed v 0.14.3", "deepspeed", "0.14.3"),
        ("same with ds 0.14 and torch 2.3", "deepspeed", "0.14"),  # the short name, a series
        ("| deepspeed | 0.14.3 |", "deepspeed", "0.14.3"),  # an issue template's table
        ("| DeepSpeed version | `v0.14.3` |", "deepspeed", "0.14.3"),
        ("deepspeed | 0.14.3", "deepspeed", "0.14.3"),
        # as a sentence, and in Markdown bold (issue 48's fresh sample missed both)
        ("My DeepSpeed version is 0.16.4.", "deepspeed", "0.16.4"),
        ("the torch version was v2.3.0 when it broke", "torch", "2.3.0"),
        ("**DeepSpeed version**: 0.16.4", "deepspeed", "0.16.4"),
        ("- **torch**: 2.5.1", "torch", "2.5.1"),
        ("**transformers version:** 4.46.0", "transformers", "4.46.0"),
        ("- __accelerate__: 1.2.0", "accelerate", "1.2.0"),
        # a Chinese template's 版本 (version), with its full-width colon (sample 48zm's 402)
        ("torch版本: 2.10.0", "torch", "2.10.0"),
        ("deepspeed 版本：0.16.4", "deepspeed", "0.16.4"),
        # what `llamafactory-cli version` is pasted as (sample 48g)
        (
            "llamafactory-cli: 0.9.2.dev0   (obtained via **llamafactory-cli version**)",
            "llamafactory",
            "0.9.2.dev0",
        ),
        # the project's own name as tickets write it (sample 48zy's 301; 48's heldout 014)
        ("Llama-factory版本：0.8.2", "llamafactory", "0.8.2"),
        ("LLaMA Factory   0.8.4", "llamafactory", "0.8.4"),
        # the name and its release as one word in an environment line (sample 48zza's 414)
        ("环境：v100，torch2.1.0+cu118，xtuner0.1.18", "torch", "2.1.0+cu118"),
        ("env: deepspeed0.14.2, cuda 12.1", "deepspeed", "0.14.2"),
        # Unsloth's banner: a sentence's period after the release (48zzb's 105 and 116), and pip's install line
        ("O^O/ \\_/ \\    Torch: 2.6.0+cu124. CUDA: 8.0. CUDA Toolkit: 12.4.", "torch", "2.6.0+cu124"),
        (
            "==((====))==  Unsloth 2026.9.4: Fast Qwen3_5 patching. Transformers: 5.3.0.",
            "transformers",
            "5.3.0",
        ),
        (
            "Successfully installed tokenizers-0.22.0 transformers-4.56.1 trl-0.23.0 unsloth-2025.9.4",
            "trl",
            "0.23.0",
        ),
        # sample 48m's three: an upgrade the failure came after, a check naming the release it found, and a
        # traceback's listing of the package's own __init__.py (IPython's)
        ("AttributeError after upgrading trl 0.21.0 > 0.22.0", "trl", "0.22.0"),
        ("updated transformers from 4.45.2 to 4.46.0 and now", "transformers", "4.46.0"),
        (
            "you need flash_attn package version to be greater or equal than 2.1.0. Detected version 2.0.4.",
            "flash-attn",
            "2.0.4",
        ),
        (
            "File ~/.conda/lib/python3.10/site-packages/peft/__init__.py:22\n     18 # limitations\n"
            '     20 __version__ = "0.5.0.dev0"\n---> 22 from .auto import (',
            "peft",
            "0.5.0.dev0",
        ),
        # a pip list's NCCL wheel, versioned as the NCCL it holds (samples 48t and 48u)
        ("nvidia-nccl-cu12              2.20.5", "nccl", "2.20.5"),
        # name-version pairs as wheels name them, listed (sample 48ze)
        ("peft-0.10.0, datasets-2.19.0, transformers-4.40.1, Python 3.11.9", "transformers", "4.40.1"),
        ("peft-0.10.0, datasets-2.19.0", "peft", "0.10.0"),
        # transformers-cli env's torch line, whatever its brackets say: "(GPU?)" up to 4.45, "(accelerator?)" from
        # 4.46, a reporter's own words (sample 48zr's 103)
        ("- PyTorch version (GPU?): 2.1.2 (True)", "torch", "2.1.2"),
        ("- PyTorch version (accelerator?): 2.1.2 (CUDA)", "torch", "2.1.2"),
        ("- PyTorch version (cuda 12.2): 2.1.2 (True)", "torch", "2.1.2"),
        # after a dash the name is the package's (sample 48zs's 301)
        ("with error No such device --NCCL 2.7.8", "nccl", "2.7.8"),
    ],
)
def test_other_packages_named_in_prose(text: str, package: str, version: str) -> None:
    assert log_versions(text, [package]) == {package: version}


@pytest.mark.parametrize(
    "text",
    [
        "deepspeed-ops 0.14.2",  # another distribution's name around it
        "my.deepspeed 0.14.2",
        "deepspeed 0.14.2x",  # not a version that ends there
        "torchvision 0.19.0",
        "needs 0.14.2",  # "ds" only as a word of its own
        "ds_report 0.14.2",
        "| deepspeed-kernels | 0.14.2 |",  # another package's row
        "the deepspeed version is not 0.14.2",  # a sentence about a version that is not the one run
        "see deepspeed.__init__ 0.14.2x",
        "deepspeed needs accelerate>=0.20.1 but found 0.19.0 installed",  # another package's release, after it
        "File /x/site-packages/deepspeed/__init__.py:3\n    import torch\ntorch.__version__ = '2.3.0'",
        # a file named by its release goes on past it: not a list of name-version pairs
        "pip install deepspeed-0.14.2.tar.gz",
        "torch-2.3.0+cu121-cp311-cp311-linux_x86_64.whl",
        "my-deepspeed-0.14.2, then",
        "installed py-torch 1.0 by mistake",  # after a word and one hyphen: another name
        # one word with the release only as a whole word: not inside a path, a longer name or a file's name
        "/opt/conda/pkgs/torch2.1.0/lib",
        "mytorch2.1.0 build",
        "deepspeed0.14.2-cp311.whl",
        "Successfully installed deepspeed-kernels-0.14.2",  # another distribution's pair
        "deepspeed 0.14.2.x",  # a release that goes on past a dot
    ],
)
def test_a_name_inside_another_is_no_version(text: str) -> None:
    assert log_versions(text, ["deepspeed", "torch"]) == {}


def test_a_release_the_librarys_own_message_cites_is_not_the_users() -> None:
    """torch's weights_only warning says "In PyTorch 2.6, we changed the default...": that was read as the log's
    torch 2.6 (issue 36). The user's own version, said elsewhere, still is."""
    warning = "FutureWarning: In PyTorch 2.6, we changed the default value of the `weights_only` argument"
    assert log_versions(warning, ["torch"]) == {}
    assert log_versions("torch 2.5.1 here\n" + warning, ["torch"]) == {"torch": "2.5.1"}
    assert log_versions("deepspeed: 3 ranks", ["deepspeed"]) == {}


def test_versions_are_found_in_linear_time() -> None:
    """`^\\s*deepspeed info` spanned blank lines: 20,000 newlines took 26 s."""
    start = time.monotonic()
    # named, with no version: every try fails
    assert log_versions("\n" * 200_000 + "deepspeed\n", ["deepspeed"]) == {}
    assert log_versions("\n" * 1000 + "deepspeed info ................... 0.14.2\n", ["deepspeed"]) == {
        "deepspeed": "0.14.2"
    }
    assert time.monotonic() - start < GENEROUS_S  # 20,000 newlines took 26 s before: 200,000, about an hour


def test_lines_padded_to_a_terminals_width_are_not_taken_for_its_wrap() -> None:
    """A copied terminal screen pads short lines with blanks to its width and breaks long ones a little before it
    (torchtune#2676): the padded lines are not where lines were cut, the broken ones are."""
    padded = "    get_response = self._backend.get_state()" + " " * 60
    cut = '  File "/v/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 1255, i'
    text = "\n".join(
        [padded, cut, "n num_nodes_waiting   ", padded, cut, "n sync", padded, cut, "n get_state"]
    )
    lines = normalise(text).splitlines()
    assert lines[1].endswith("line 1255, in num_nodes_waiting   ") and lines[0] == padded


def test_verls_diagnose_section_and_a_dev_release_are_read() -> None:
    """verl's `scripts/diagnose.py` prints its own version under a section header; a development tree says
    "0.7.0.dev" (PEP 440's .dev0), as a verl issue report of 2026 shows."""
    text = "torch        : 2.8.0\n----------verl Info-----------\nVersion      : 0.7.0.dev\nDirectory    : /w/verl\n"
    assert log_versions(text, ["verl", "torch"]) == {"verl": "0.7.0.dev", "torch": "2.8.0"}


@pytest.mark.parametrize(
    ("text", "package", "listed"),
    [
        (
            "deepspeed: 0.15.3 & 0.14.5",
            "deepspeed",
            ("0.15.3", "0.14.5"),
        ),  # sample k's 102, a "+1" commenter's
        ("tried with torch 2.4.1 or 2.5.0+cu121", "torch", ("2.4.1", "2.5.0+cu121")),
        ("transformers==4.46.0, 4.47.1 and 4.48.0", "transformers", ("4.46.0", "4.47.1", "4.48.0")),
        ("torch 2.3.1, transformers 4.45.2", "torch", ("2.3.1",)),  # the next package's version is its own
        ("deepspeed 0.14.5, 2 nodes", "deepspeed", ("0.14.5",)),
        ("deepspeed 0.14.5 / 0.14.5", "deepspeed", ("0.14.5",)),  # said twice, read once
    ],
)
def test_versions_listed_after_the_first_are_read_each(
    text: str, package: str, listed: tuple[str, ...]
) -> None:
    assert log_version_lists(text, [package]) == {package: listed}
    assert log_versions(text, [package]) == {package: listed[0]}  # the verdict's version: the first


def test_triage_judges_on_the_first_listed_and_says_the_others() -> None:
    from ds_doctor.knowledge.triage import read_log
    from ds_doctor.reports.triage import render_triage

    reading = read_log("deepspeed: 0.15.3 & 0.14.5\nAssertionError: zero stage 2 requires an optimizer", {})
    used = reading.versions["deepspeed"]
    assert (used.version, used.also, used.source) == ("0.15.3", ("0.14.5",), "the log")
    assert [m.issue.id for m in reading.matches] == ["ds_zero_config_without_optimizer"]
    assert "deepspeed 0.15.3 (also 0.14.5) (from the log)" in render_triage(reading.matches)


def test_a_message_glued_to_a_chinese_title_is_read_as_a_word_of_its_own() -> None:
    """48n's 310: "做全参数SFT报错No module named ..." - to a regex a CJK character and a Latin letter are both word
    characters, so no word boundary lay between them; the text is read with a space there, and nowhere else."""
    assert normalise("做全参数SFT报错No module named 'x'") == "做全参数 SFT 报错 No module named 'x'"
    assert normalise("No module named 'x' ok") == "No module named 'x' ok"
    assert normalise("第0个step") == "第 0 个 step"


def test_a_version_typed_in_parentheses_after_its_label_is_read() -> None:
    """48zg's 105: "transformers version :  (4.33.3)"; a requirement in the same text ("accelerate>=0.20.1") is not
    the installed release."""
    from ds_doctor.knowledge.logtext import log_versions

    text = "requires `accelerate>=0.20.1`\ntransformers version :  (4.33.3)"
    assert log_versions(text, ["transformers", "accelerate"]) == {"transformers": "4.33.3"}


def test_the_torch_a_deepspeed_op_builder_detected_is_read() -> None:
    """48zh's 306: DeepSpeed's op builder names the torch it detected ("but detected 2.4"), not the range it wants."""
    from ds_doctor.knowledge.logtext import log_versions

    text = "[WARNING]  sparse_attn requires a torch version >= 1.5 and < 2.0 but detected 2.4"
    assert log_versions(text, ["torch", "deepspeed"]) == {"torch": "2.4"}


def test_pdsh_host_prefixes_go_and_each_hosts_lines_come_together() -> None:
    """DeepSpeed's multi-node launcher (pdsh) starts each line a node prints with its host: gone, and each host's
    lines put back together (48zx's 101: a frame anchored at the line's start, under "675d-5: "). A host-like word
    said on fewer than HOST_LINES lines stays text."""
    text = "worker-0: a\nworker-1: x\nworker-0: b\nworker-1: y\nworker-0: c\nworker-1: z"
    assert normalise(text) == "a\nb\nc\nx\ny\nz"
    said = "cuda12: not found\nRuntimeError: boom\ncuda12: again"
    assert normalise(said) == said
