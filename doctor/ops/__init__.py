"""DeepSpeed's JIT-built ops as a set-up phase of a run: built once per node and stack before any launch, with
progress said and a bound of its own (`phase`), in the folder the user's jobs of this environment share (`cache`),
through torch's build locks, judged and cleared where their builder is gone (`locks`).

`python -m ds_doctor.ops` builds (or loads) them alone, saying what it does: `make`'s set-up runs it."""

#: DeepSpeed's ops the probes load: its Adams, and on a CPU node the shared-memory comm `init_distributed` builds
DEEPSPEED_OPS = ("CPUAdamBuilder", "FusedAdamBuilder", "ShareMemCommBuilder")
