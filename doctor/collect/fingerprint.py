"""A rank's fingerprint: everything that must be the same on every rank of a job, as flat `key -> text` pairs
(Python and package versions, torch's CUDA/NCCL/cuDNN build, the driver, this rank's GPU, /dev/shm, the
allowlisted environment variables, redacted). Reading it touches no tensor."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from ds_doctor.hardware.env import package_versions, relevant_variables

UNSET = "<unset>"


def _torch_build(device: str) -> dict[str, str]:
    import torch

    build = {"torch.cuda": str(torch.version.cuda), "torch.cudnn": str(torch.backends.cudnn.version())}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        build.update(
            {
                "torch.nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "gpu.name": props.name,
                "gpu.memory_gib": f"{props.total_memory / 2**30:.0f}",
                "gpu.compute_capability": f"{props.major}.{props.minor}",
            }
        )
    return build


def _nvml(device: str) -> dict[str, str]:
    """Driver versions, and this rank's GPU's ECC mode; nothing where NVML cannot say."""
    if not device.startswith("cuda"):
        return {}
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        out = {"driver": str(pynvml.nvmlSystemGetDriverVersion())}
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
        out["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        props: Any = torch.cuda.get_device_properties(torch.device(device))
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        out["gpu.ecc"] = str(bool(pynvml.nvmlDeviceGetEccMode(pynvml.nvmlDeviceGetHandleByPciBusId(bus))[0]))
        return out
    except Exception:
        return {}
    finally:
        pynvml.nvmlShutdown()


def shm_bytes() -> str:
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return UNSET
    return str(stat.f_blocks * stat.f_frsize)


def fingerprint(rank: int, node: int | None, device: str) -> dict[str, str]:
    """This rank's fingerprint; `rank`, `node` and `host` say where it was taken."""
    prints = {
        "rank": str(rank),
        "node": str(node),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "shm_bytes": shm_bytes(),
    }
    prints.update({f"package:{name}": str(version) for name, version in package_versions().items()})
    prints.update(_torch_build(device))
    prints.update(_nvml(device))
    variables = relevant_variables()
    # ds-doctor's own pick, per node (run/launch.py): the user's setting is what consistency compares
    if os.environ.get("DS_DOCTOR_CHOSE_GLOO_SOCKET_IFNAME"):
        variables.pop("GLOO_SOCKET_IFNAME", None)
    prints.update({f"env:{name}": value for name, value in variables.items()})
    return prints
