"""What a probe records beyond `ctx.snapshot`: the tracked parameter set of an optimizer, the calls a library makes
inside a step, a rank's fingerprint, the tensors nested in any container. Metadata only, as the device map is."""

from ds_doctor.collect.devicemap import iter_nested_tensors
from ds_doctor.collect.fingerprint import fingerprint
from ds_doctor.collect.observe import observe_unscale_and_clip
from ds_doctor.collect.tracked import Tracked, clean_name, optimizer_groups, tracked_names

__all__ = [
    "Tracked",
    "clean_name",
    "fingerprint",
    "iter_nested_tensors",
    "observe_unscale_and_clip",
    "optimizer_groups",
    "tracked_names",
]
