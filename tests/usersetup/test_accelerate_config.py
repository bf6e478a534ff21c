"""`--accelerate-config`: the YAML `accelerate config` writes, read, validated and turned into Accelerator arguments."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from ds_doctor.usersetup.accelerate_config import AccelerateConfigError, accelerator_kwargs, load, skip_reason


def write(tmp_path: Path, text: str, name: str = "default_config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("distributed_type: DEEPSPEED\n  mixed_precision: [bf16\n", "not YAML"),
        ("- a list\n", "an Accelerate config is a YAML mapping, not list"),
        ("distributed_type: TPU_POD\n", "distributed_type 'TPU_POD' is none of DEEPSPEED"),
        ("distributed_type: NO\nmixed_precision: fp12\n", "mixed_precision 'fp12' is none of"),
        (
            "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: absent.json\n",
            "its deepspeed_config_file: ",
        ),
    ],
)
def test_a_bad_yaml_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(AccelerateConfigError) as caught:
        load(write(tmp_path, text))
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_not_yaml_says_where(tmp_path: Path) -> None:
    with pytest.raises(AccelerateConfigError, match=r"not YAML: .* at line \d+ column \d+"):
        load(write(tmp_path, "distributed_type: DEEPSPEED\nmixed_precision: [bf16\n"))


def test_inline_deepspeed_fields_become_the_plugin(tmp_path: Path) -> None:
    setup = load(
        write(
            tmp_path,
            "distributed_type: DEEPSPEED\nmixed_precision: bf16\ndeepspeed_config:\n"
            "  zero_stage: 3\n  offload_optimizer_device: cpu\n  gradient_clipping: 0.5\n",
        )
    )
    kwargs = accelerator_kwargs(setup)
    plugin = kwargs["deepspeed_plugin"]
    assert kwargs["mixed_precision"] == "bf16" and plugin.zero_stage == 3
    assert plugin.deepspeed_config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert plugin.deepspeed_config["gradient_clipping"] == 0.5


def test_a_deepspeed_config_file_is_the_plugin_config(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text(
        json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 1}})
    )
    setup = load(
        write(tmp_path, "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n")
    )
    assert accelerator_kwargs(setup)["deepspeed_plugin"].zero_stage == 1


def test_an_unquoted_no_is_no(tmp_path: Path) -> None:
    setup = load(write(tmp_path, "distributed_type: NO\nmixed_precision: no\n"))
    assert (setup.distributed_type, setup.mixed_precision) == ("NO", "no")


def test_what_cannot_run_on_cpu_is_a_skip_with_the_reason(tmp_path: Path) -> None:
    fsdp = load(write(tmp_path, "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"))
    assert "Accelerate ignores it on CPU" in (skip_reason(fsdp, "cpu") or "")
    assert skip_reason(fsdp, "cuda") is None
    assert skip_reason(load(write(tmp_path, "distributed_type: MULTI_GPU\n", "m.yaml")), "cpu")


def test_fsdp_fields_become_the_plugin(tmp_path: Path) -> None:
    setup = load(
        write(
            tmp_path,
            "distributed_type: FSDP\nmixed_precision: bf16\nfsdp_config:\n  fsdp_version: 2\n"
            "  fsdp_offload_params: true\n  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
            "  fsdp_reshard_after_forward: true\n",
        )
    )
    plugin = accelerator_kwargs(setup)["fsdp_plugin"]
    # FSDP2: offload on
    assert plugin.fsdp_version == 2 and type(plugin.cpu_offload).__name__ == "CPUOffloadPolicy"
    assert "SHARDED_STATE_DICT" in str(plugin.state_dict_type)


HOSTILE = Path(__file__).resolve().parents[1] / "resources" / "hostile"


# a ReaderError before: exit 3
@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            'distributed_type: DEEPSPEED\ndeepspeed_config: "yes"\n',
            "deepspeed_config is 'yes', not a mapping of settings",
        ),
        ("distributed_type: FSDP\nfsdp_config: [1, 2]\n", "fsdp_config is [1, 2], not a mapping of settings"),
        ("distributed_type: [DEEPSPEED]\n", "distributed_type is ['DEEPSPEED'], not a name"),
        (
            "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: {a: 1}\n",
            "deepspeed_config.zero_stage is {'a': 1}",
        ),
        (
            "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: 5\n",
            "deepspeed_config.deepspeed_config_file is 5, not a path",
        ),
        ("distributed_type: NO\nmixed_precision: no\nx: \x00\n", "a NUL byte at line 3"),
        ((HOSTILE / "alias_bomb.yaml").read_text(), "its aliases expand to more than 100,000 nodes"),
        ("a: &a [*a]\n", "a YAML alias refers to a node that contains it"),
    ],
)
def test_a_hostile_yaml_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(AccelerateConfigError) as caught:
        load(write(tmp_path, text))
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_the_deepspeed_config_file_it_names_is_read_with_the_same_bounds(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text('{"optimizer": "adam"}')
    with pytest.raises(AccelerateConfigError, match=r"its deepspeed_config_file: .*\"optimizer\" is 'adam'"):
        load(
            write(
                tmp_path, "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
            )
        )


def test_a_yaml_from_a_pipe_is_read_and_a_relative_file_in_it_is_refused(tmp_path: Path) -> None:
    def piped(text: str) -> Path:
        fifo = tmp_path / "acc.fifo"
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
        threading.Thread(target=lambda: fifo.write_text(text), daemon=True).start()
        return fifo

    setup = load(piped("distributed_type: NO\nmixed_precision: bf16\n"))
    try:
        # what the ranks read
        assert setup.mixed_precision == "bf16" and load(setup.path).sha256 == setup.sha256
    finally:
        Path(setup.path).unlink()
    with pytest.raises(AccelerateConfigError, match="is relative, and the YAML is no file to be relative to"):
        load(piped("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"))
