"""The model a user trains, in place of ds-doctor's tiny ones (`ds-doctor run --model SPEC`).

- `hf:<model_type>` builds a tiny real architecture from transformers' own config class (no download): the
  sizes in `TINY` are applied wherever the config has the attribute, so the layers, attention, rotary
  buffers, tied embeddings and experts are the real ones, only small. `HF_TESTED` are run in the tests.
- `package.module:factory` imports a user's factory on every rank: a callable returning an `nn.Module`,
  optionally taking the world size, or `(module, make_batch)` where `make_batch(batch_size, device)` builds
  what the forward takes (a dict is passed as keyword arguments, a tuple as positional ones).

The loss of a forward is its `.loss`, else the output itself when it is a scalar, else its sum. The spec
travels to the ranks in the run options (ds_doctor.probe.rankoptions); the parent builds the model once on the CPU to
refuse a bad spec with one line before anything launches.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

HF_TESTED = ("qwen3", "llama", "mistral", "gpt2", "qwen3_moe", "mixtral")
TINY: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 64,
    "max_window_layers": 2,
    "moe_intermediate_size": 32,
    "num_local_experts": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 64,
    "n_inner": 64,
}
SEQUENCE = 8


class ModelSpecError(ValueError):
    """A `--model` that cannot be used; its message is the one line the CLI prints."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    text: str

    @property
    def kind(self) -> str:
        return "hf" if self.text.startswith("hf:") else "factory"

    @property
    def target(self) -> str:
        return self.text.removeprefix("hf:")

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        text = text.strip()
        if text.startswith("hf:") and text[3:]:
            return cls(text)
        module, _, name = text.partition(":")
        if module and name and all(part.isidentifier() for part in [*module.split("."), name]):
            return cls(text)
        raise ModelSpecError(
            f"--model {text!r}: expected hf:<model_type> (e.g. hf:qwen3) or package.module:factory"
        )


@dataclasses.dataclass
class Trainable:
    """A module with a way to make its batches and read its loss."""

    module: Any
    make_batch: Callable[[int, Any], Any]
    spec: str

    def loss(self, model: Any, size: int, *, device: Any, dtype: Any, seed: int) -> Any:
        """One forward of `model` (the module, or an engine wrapping it) on a deterministic batch; its loss."""
        import torch

        torch.manual_seed(seed)
        batch = _cast_floats(self.make_batch(size, device), dtype)
        if isinstance(batch, dict):
            output = model(**batch)
        elif isinstance(batch, tuple):
            output = model(*batch)
        else:
            output = model(batch)
        return loss_of(output)

    def freeze(self, pattern: str | None, *, required: bool = True) -> list[str]:
        """Freeze the parameters whose names match `pattern` (fnmatch, e.g. `model.embed_tokens.*`), or the input
        embedding when there is none; the names frozen (a tied one under each of its names). Nothing to freeze is
        a ModelSpecError, or an empty list when not `required`."""
        import fnmatch

        import torch

        names = dict(self.module.named_parameters(remove_duplicate=False))
        if pattern:
            chosen = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        else:
            get = getattr(self.module, "get_input_embeddings", None)
            embedding = (
                get()
                if callable(get)
                else next((m for m in self.module.modules() if isinstance(m, torch.nn.Embedding)), None)
            )
            chosen = [n for n, p in names.items() if embedding is not None and p is embedding.weight]
        if not chosen and not required:
            return []
        if not chosen:
            raise ModelSpecError(
                f"--freeze {pattern!r} matches no parameter of {self.spec}; its parameters: "
                f"{', '.join(list(names)[:12])}{', ...' if len(names) > 12 else ''}"
                if pattern
                else f"{self.spec} has no input embedding to freeze: name a part with --freeze PATTERN"
            )
        for name in chosen:
            names[name].requires_grad_(False)
        return chosen

    def describe(self) -> str:
        params = sum(p.numel() for p in self.module.parameters())
        return f"{self.spec} ({type(self.module).__name__}, {params / 1e6:.2f} M parameters)"


def _cast_floats(batch: Any, dtype: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(dtype) if batch.is_floating_point() else batch
    if isinstance(batch, dict):
        return {k: _cast_floats(v, dtype) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_cast_floats(v, dtype) for v in batch)
    return batch


def loss_of(output: Any) -> Any:
    import torch

    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is not None:
        return loss
    if isinstance(output, torch.Tensor):
        return output if output.numel() == 1 else output.sum()
    tensors = [
        v for v in (output.values() if isinstance(output, dict) else output) if isinstance(v, torch.Tensor)
    ]
    if not tensors:
        raise TypeError(f"the model's output ({type(output).__name__}) has no .loss and no tensor to sum")
    return tensors[0].sum()


def hf_types() -> list[str]:
    """Model types transformers can build as a causal LM from a config alone."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(t for t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if t in CONFIG_MAPPING)


def tiny_config(model_type: str) -> Any:
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    for key, value in TINY.items():
        if hasattr(config, key):
            setattr(config, key, value)
    if getattr(config, "sliding_window", None):
        config.sliding_window = TINY["max_position_embeddings"]
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, list) and len(layer_types) != config.num_hidden_layers:
        # the class sized it for its default depth: save_pretrained (a Trainer's checkpoint) refuses the mismatch
        config.layer_types = layer_types[: config.num_hidden_layers]
    return config


def _hf(model_type: str, seed: int) -> Trainable:
    import torch
    from transformers import AutoModelForCausalLM

    if model_type not in hf_types():
        raise ModelSpecError(
            f"--model hf:{model_type}: not a causal-LM model type of transformers; tested: "
            f"{', '.join(HF_TESTED)}; every valid one: {', '.join(hf_types())}"
        )
    torch.manual_seed(seed)
    module = AutoModelForCausalLM.from_config(tiny_config(model_type))
    vocab = module.config.vocab_size

    def make_batch(size: int, device: Any) -> dict[str, Any]:
        ids = torch.randint(0, vocab, (size, SEQUENCE), device=device)
        return {"input_ids": ids, "labels": ids}

    return Trainable(module, make_batch, f"hf:{model_type}")


def _factory(target: str, world_size: int, seed: int) -> Trainable:
    import torch

    module_name, _, name = target.partition(":")
    try:
        factory = getattr(_import_user_module(module_name, target), name)
    except AttributeError as exc:
        raise ModelSpecError(f"--model {target}: does not import: {type(exc).__name__}: {exc}") from None
    torch.manual_seed(seed)
    takes_size = (
        any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in inspect.signature(factory).parameters.values()
        )
        if callable(factory)
        else False
    )
    made = factory(world_size) if takes_size else factory()
    module, make_batch = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if not isinstance(module, torch.nn.Module):
        raise ModelSpecError(
            f"--model {target}: the factory returned {type(made).__name__}, not an nn.Module "
            "(or an (nn.Module, make_batch) pair)"
        )
    if make_batch is None:
        vocab = _input_vocab(module)

        def make_batch(size: int, device: Any) -> Any:
            return torch.randint(0, vocab, (size, SEQUENCE), device=device)

    return Trainable(module, make_batch, target)


def _import_user_module(module_name: str, text: str) -> Any:
    """The user's module. The console script does not put the working directory on the path: it goes last, so a
    project's own `probes/` or `doctor.py` never shadows ds-doctor's."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelSpecError(f"--model {text}: does not import: {type(exc).__name__}: {exc}") from None


def _input_vocab(module: Any) -> int:
    import torch

    embedding = next((m for m in module.modules() if isinstance(m, torch.nn.Embedding)), None)
    if embedding is None:
        raise ModelSpecError(
            "the factory's module takes no token ids (it has no nn.Embedding): return "
            "(module, make_batch) with make_batch(batch_size, device) building its input"
        )
    return int(embedding.num_embeddings)


def build(spec: ModelSpec, world_size: int = 1, seed: int = 0) -> Trainable:
    return _hf(spec.target, seed) if spec.kind == "hf" else _factory(spec.target, world_size, seed)


def check(
    text: str, freeze: str | None = None, stage: Callable[[str], None] = lambda _name: None
) -> ModelSpec:
    """The check before launching: parse, build once on the CPU, freeze what --freeze names, run one forward;
    ModelSpecError with one line when any of it fails. A factory's check runs in a process of its own
    (`ds_doctor.usersetup.model_check`), which reports each `stage` as it is reached."""
    spec = ModelSpec.parse(text)
    try:
        import torch

        if spec.kind == "factory":
            stage(f"importing {spec.target.partition(':')[0]}")
            _import_user_module(spec.target.partition(":")[0], text)
        stage("building the model")
        trainable = build(spec)
        if freeze is not None:
            stage("freezing what --freeze names")
            trainable.freeze(freeze)
        stage("one forward on the CPU")
        trainable.loss(trainable.module, 2, device="cpu", dtype=torch.float32, seed=0).item()
    except ModelSpecError:
        raise
    except ImportError as exc:
        raise ModelSpecError(f"--model {text}: needs {exc.name or exc} (pip install transformers)") from None
    except Exception as exc:
        raise ModelSpecError(
            f"--model {text}: one forward on the CPU failed: {type(exc).__name__}: {exc}"[:300]
        ) from None
    return spec
