"""warm_client — a small Python client of warmd, the local model service.

It uses Debian's python3-grpcio and the stubs generated from proto/warm/v1/warm.proto
at build time (module warm.v1): installed next to it by the python3-warm package, or,
in a checkout, build/python/warm/v1/warm_pb2*.py with that directory on sys.path or
named in $WARM_PYTHON.

    from warm_client import Client
    with Client() as c:                      # $WARM_SOCKET or /run/warmd.sock
        stream = c.generate("qwen3", "Why is the sky blue?", max_tokens=64)
        for piece in stream:
            print(piece, end="", flush=True)
        print(stream.summary.generated_tokens)
"""

from .client import DEFAULT_SOCKET, JSON_OBJECT, Client, Stream, WarmError

__all__ = ["Client", "Stream", "WarmError", "DEFAULT_SOCKET", "JSON_OBJECT"]
