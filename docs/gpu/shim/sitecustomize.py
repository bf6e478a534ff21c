# Only for showing DeepSpeed #5538 live on torch 2.11: deepspeed 0.14.2 imports a private that torch 2.4
# removed (pytorch#125743; DeepSpeed #5603, fixed by #5654), and numpy.BUFSIZE, which numpy 2 removed.
# This puts those two names back, nothing else.
try:
    import socket

    import torch.distributed.elastic.agent.server.api as _api

    if not hasattr(_api, "_get_socket_with_port"):
        def _get_socket_with_port() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("localhost", 0))
            s.listen(0)
            return s

        _api._get_socket_with_port = _get_socket_with_port
except Exception:
    pass

try:
    import numpy

    if not hasattr(numpy, "BUFSIZE"):
        numpy.BUFSIZE = 8192
except Exception:
    pass
