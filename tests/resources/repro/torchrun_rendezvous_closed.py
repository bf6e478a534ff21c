"""Run: python tests/resources/repro/torchrun_rendezvous_closed.py

torchrun's own c10d rendezvous, driven as two agents would: node A joins the run "job1" and leaves for good
(its handler's shutdown(), which torchrun calls when its workers finished or failed with no restart left, closes
the rendezvous); node B then tries to join the same run and gets RendezvousClosedError.
"""

from __future__ import annotations

import socket

from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousParameters
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def agent_handler(endpoint: str) -> RendezvousHandler:
    params = RendezvousParameters(
        backend="c10d",
        endpoint=endpoint,
        run_id="job1",
        min_nodes=1,
        max_nodes=2,
        local_addr="127.0.0.1",
        last_call_timeout=1,
        join_timeout=20,
    )
    backend, store = create_backend(params)
    return create_handler(store, backend, params)


def main() -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    node_a = agent_handler(endpoint)
    node_a.next_rendezvous()
    node_a.shutdown()
    node_b = agent_handler(endpoint)
    node_b.next_rendezvous()


if __name__ == "__main__":
    main()
