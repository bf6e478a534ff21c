"""Known issues of torchrun, its rendezvous, NCCL and torch's own environment: ports, shared memory, duplicate GPUs,
watchdog timeouts, killed ranks, a missing numpy.

Entries are written from the upstream threads (see shared/KNOWN_ISSUES.md for the raw notes).
"""

from __future__ import annotations

from doctor.knowledge.issues import KnownIssue

LAUNCH: tuple[KnownIssue, ...] = (
    KnownIssue(
        id="torchrun_rendezvous_unreachable",
        title="torchrun rendezvous endpoint unreachable",
        package="torch",
        patterns=(r"RendezvousConnectionError: The connection to the C10d store has failed", r"RendezvousTimeoutError",
                  r"client socket has timed out after \d+s while trying to connect to"),
        cause="The nodes cannot reach the rendezvous address (firewall, wrong interface, unresolvable host name) or "
        "did not start within the join timeout.",
        remedy="Check `nc -z <endpoint> <port>` from every node; use an IP reachable from all nodes; start all nodes "
        "with identical --nnodes/--rdzv-id/--rdzv-backend.",
        refs=("https://github.com/pytorch/pytorch/issues/64926", "https://github.com/pytorch/pytorch/pull/139702"),
    ),
    KnownIssue(
        id="torchrun_port_in_use",
        title="Rendezvous port already in use",
        package="torch",
        patterns=(r"server socket has failed to (listen on any local network address|bind to)"
                  r".*(EADDRINUSE|Address already in use)",),
        cause="Another process on the host already holds the master/rendezvous port (torchrun's default is 29500).",
        remedy="Pick a free --master-port, or --rdzv-endpoint localhost:0 on a single node; kill stale processes.",
        refs=("https://github.com/pytorch/pytorch/issues/73320",),
    ),
    KnownIssue(
        id="nccl_shm_system_error",
        title="NCCL unhandled system error (usually /dev/shm too small)",
        package="torch",
        patterns=(r"unhandled system error",),
        requires=(r"NCCL",),
        cause="NCCL could not create its shared-memory segment (containers default /dev/shm to 64 MB) or another "
        "system call failed.",
        remedy="Run the container with --shm-size=1g or --ipc=host; NCCL_DEBUG=INFO shows the failing call; "
        "NCCL_SHM_DISABLE=1 as a slow fallback.",
        refs=("https://github.com/NVIDIA/nccl/issues/342", "https://github.com/pytorch/pytorch/issues/37004"),
    ),
    KnownIssue(
        id="nccl_duplicate_gpu",
        title="NCCL: two ranks on one GPU",
        package="torch",
        patterns=(r"Duplicate GPU detected : rank \d+ and rank \d+ both on CUDA device",),
        cause="Two ranks use the same physical GPU: no torch.cuda.set_device(LOCAL_RANK), more ranks than GPUs, or "
        "CUDA_VISIBLE_DEVICES changed after CUDA was initialised.",
        remedy="torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before init_process_group; keep ranks <= GPUs.",
        refs=("https://github.com/pytorch/pytorch/issues/129385",),
    ),
    KnownIssue(
        id="nccl_watchdog_timeout",
        title="NCCL watchdog: collective timed out",
        package="torch",
        patterns=(r"Watchdog caught collective operation timeout",),
        cause="A rank did not enter or finish the same collective within the process-group timeout (slow rank-local "
        "work, mismatched collectives, or a hung peer).",
        remedy="Find the rank that did not arrive (compare OpType/NumelIn across ranks); move rank-local work out of "
        "the distributed section; raise the timeout only when the work is legitimately slow.",
        refs=("https://github.com/pytorch/pytorch/issues/97191",),
    ),
    KnownIssue(
        id="torchrun_child_sigkill",
        title="A rank was SIGKILLed (usually the host OOM killer)",
        package="torch",
        # torchrun's failure summary; DeepSpeed's own launcher (launcher/launch.py sigkill_handler) words it otherwise
        patterns=(r"exitcode\s*:\s*-9\b", r"Signal 9 \(SIGKILL\)", r"\bSIGKILL\b", r"exits with return code = -9\b"),
        cause="The worker was killed from outside, most often by the kernel OOM killer when every rank materialises "
        "the model in host RAM.",
        remedy="Check dmesg / the cgroup's OOM events; reduce host memory per rank (RAM-efficient loading, fewer "
        "dataloader workers).",
        refs=("https://github.com/meta-pytorch/torchtune/issues/1710",),
    ),
    KnownIssue(
        id="torch_numpy_missing",
        title="torch without a working numpy: object collectives and .numpy() fail",
        package="numpy",
        patterns=(r"RuntimeError: Numpy is not available", r"Failed to initialize NumPy",
                  r"No module named '?numpy'?"),
        cause="torch does not require numpy, but torch.distributed's object collectives (all_gather_object, "
        "broadcast_object_list, gather_object) decode each rank's bytes with tensor.numpy(), as .numpy() and "
        "from_numpy do; a node without numpy, or with a numpy its torch build cannot load (numpy 2 under "
        "torch < 2.3), fails there while the other nodes pass.",
        remedy="pip install numpy (numpy >= 2 needs torch >= 2.3), the same version on every node; code that "
        "must run anywhere can gather tensors instead of objects.",
        refs=("https://github.com/pytorch/pytorch/issues/78341", "https://github.com/pytorch/pytorch/issues/132179"),
    ),
)
