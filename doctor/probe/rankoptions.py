"""Every option of a run that a rank needs, as one frozen value (nox threads one `Namespace` the same way).

The parent builds it from the command line once, writes it into each launch directory beside `cases.json`, and
builds the ranks' environment from it in one function (`ds_doctor.run.command.rank_environment`). A rank reads it back
into its probe context (`ctx.options`) and expands the registry's variants with it, so the cases a rank finds and
what they run on never depend on the rank's ambient environment, and the parent never assigns to `os.environ`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The file beside `cases.json` in a launch directory.
FILE_NAME = "options.json"
DEFAULT_SUSPECT_BELOW = 0.5

#: The value of an option added to `run` from outside ds-doctor, as a rank reads it (one JSON value)
Scalar = str | int | float | bool | None


class RankOptionsError(ValueError):
    """An options file that is not one ds-doctor wrote (a rank ends its launch with this line)."""


@dataclasses.dataclass(frozen=True)
class RankOptions:
    """What `ds-doctor run` hands every rank.

    Attributes:
        deepspeed_config: the kept copy of `--deepspeed-config` (a path), or None.
        accelerate_config: the kept copy of `--accelerate-config` (a path), or None.
        model: `--model`'s spec text (`hf:qwen3`, `pkg.mod:factory`), or None for the families' own models.
        freeze: `--freeze`'s pattern, or None for the default.
        suspect_below: `--suspect-below`, the fabric family's threshold.
        matrix: `--matrix`, how much of the equivalence family's knob matrix level 3 runs ("pairs", "full").
        shared_gpu: how ranks share a GPU where there are more ranks than GPUs (a key of
            `ds_doctor.run.plan.SHARED_GPU_MODES`).
        overlay: the `--with` overlay folder the ranks import first, or None on the installed stack.
        extensions_dir: where the ranks JIT-build ops (`TORCH_EXTENSIONS_DIR`), or None for torch's default.
        node_rank: this node's rank in a multi-node run, or None on one node.
        nnodes: the nodes of a multi-node run, or None on one node.
        ops_failed: why DeepSpeed's ops are not all there after the run's build phase (`ds_doctor.ops.phase`), or
            None: a case that needs them fails at once with this reason instead of building them under its clock.
        added: the options added to `run` from outside ds-doctor and marked for the ranks
            (`ds_doctor.cli_options.register`), by name: `dict(ctx.options.added)["name"]`.

    The fields the command line fills are those its definitions mark for the ranks (`ds_doctor.cli_options`,
    `Into.RANKS`: `--deepspeed-config`, `--accelerate-config`, `--model`, `--freeze`, `--suspect-below`), through
    `of`; the parent fills the rest.
    """

    deepspeed_config: str | None = None
    accelerate_config: str | None = None
    model: str | None = None
    freeze: str | None = None
    suspect_below: float = DEFAULT_SUSPECT_BELOW
    matrix: str = "pairs"
    shared_gpu: str = "nccl-hostid"
    overlay: str | None = None
    extensions_dir: str | None = None
    node_rank: int | None = None
    nnodes: int | None = None
    ops_failed: str | None = None
    added: tuple[tuple[str, Scalar], ...] = ()

    @classmethod
    def of(cls, given: Mapping[str, object]) -> RankOptions:
        """The ranks' options from the values of the run options marked for them, by the field each fills: one of
        these fields, or (an option added from outside ds-doctor) one of `added`."""
        own = {field.name for field in dataclasses.fields(cls)} - {ADDED}
        return cls.checked(
            {
                **{name: value for name, value in given.items() if name in own},
                ADDED: {name: value for name, value in given.items() if name not in own},
            }
        )

    @classmethod
    def checked(cls, data: Mapping[str, Any]) -> RankOptions:
        """The options `data` holds by field (`added` as an object by name), each checked against its field's type:
        what is not one ds-doctor writes is refused (`RankOptionsError`)."""
        known = {field.name: field for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise RankOptionsError(
                f"the run options hold fields this ds-doctor does not know: {', '.join(unknown)}"
            )
        for name, value in data.items():
            _check_type(name, value, known[name].type)
        return cls(**{**data, ADDED: tuple(sorted(dict(data.get(ADDED) or {}).items()))})

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data[ADDED] = dict(self.added)
        if not self.added:  # the file as before options could be added: ds-doctor's own only
            del data[ADDED]
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RankOptions:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RankOptionsError(f"the run options are not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise RankOptionsError("the run options are not a JSON object")
        return cls.checked(data)

    def write(self, folder: Path) -> Path:
        from ds_doctor.files import write_atomic

        path = folder / FILE_NAME
        write_atomic(path, self.to_json() + "\n")
        return path

    @classmethod
    def read(cls, folder: Path) -> RankOptions:
        """The options a launch directory holds; the defaults where it holds none (a directory written by a
        ds-doctor before them, or by a test)."""
        path = folder / FILE_NAME
        if not path.exists():
            return cls()
        return cls.from_json(path.read_text(encoding="utf-8"))

    def with_overlay(self, path: Path, own_ops: bool = True) -> RankOptions:
        """The same run on an overlay: its folder first on the ranks' path and, where it holds what DeepSpeed's ops
        are built against (`own_ops`), its own extensions folder."""
        extensions = str(path / "torch_extensions") if own_ops else self.extensions_dir
        return dataclasses.replace(self, overlay=str(path), extensions_dir=extensions)

    # what the probes read: parsed and loaded here, once per process

    def model_spec(self) -> Any:
        """`--model` as a `ds_doctor.usersetup.model.ModelSpec`, or None."""
        from ds_doctor.usersetup.model import ModelSpec

        return ModelSpec.parse(self.model) if self.model else None

    def user_deepspeed_config(self) -> Any:
        """`--deepspeed-config` as a `ds_doctor.usersetup.deepspeed_config.UserConfig`, or None."""
        from ds_doctor.usersetup.deepspeed_config import load_once

        return load_once(self.deepspeed_config) if self.deepspeed_config else None

    def user_accelerate_config(self) -> Any:
        """`--accelerate-config` as a `ds_doctor.usersetup.accelerate_config.AccelerateSetup`, or None."""
        from ds_doctor.usersetup.accelerate_config import load_once

        return load_once(self.accelerate_config) if self.accelerate_config else None


#: The options of a run that names none (the tests', the API's).
DEFAULTS = RankOptions()

ADDED = "added"
_TYPES: dict[str, tuple[type, ...]] = {
    "str | None": (str, type(None)),
    "str": (str,),
    "float": (int, float),
    "int | None": (int, type(None)),
}
_SCALARS = (str, int, float, bool, type(None))


def _check_type(name: str, value: Any, annotation: Any) -> None:
    if name == ADDED:
        if not isinstance(value, dict) or not all(isinstance(v, _SCALARS) for v in value.values()):
            raise RankOptionsError(f"the run option {name} is not an object of single values (text, numbers)")
        return
    allowed = _TYPES[str(annotation)]
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise RankOptionsError(f"the run option {name} is {type(value).__name__}, not {annotation}")
