#!/usr/bin/python3
"""Streams a generation from warmd and prints the tokens as they arrive.

    WARM_PYTHON=build/python PYTHONPATH=client/python \
        /usr/bin/python3 client/python/examples/stream.py MODEL "Once upon a time" -n 64

Installed with python3-warm: /usr/share/doc/python3-warm/examples/stream.py MODEL PROMPT.

Use Debian's /usr/bin/python3 (python3-grpcio); a pyenv python3 earlier on PATH cannot
see it."""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from warm_client import Client, WarmError  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("prompt")
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("-t", "--temperature", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--socket", default=None, help="default: $WARM_SOCKET or /run/warmd.sock")
    args = ap.parse_args()
    try:
        with Client(args.socket) as client:
            stream = client.generate(args.model, args.prompt, max_tokens=args.max_tokens,
                                     temperature=args.temperature, seed=args.seed)
            for piece in stream:
                sys.stdout.write(piece)
                sys.stdout.flush()
            sys.stdout.write("\n")
            s = stream.summary
            print(f"[{s.prompt_tokens} prompt tokens ({s.ram_tokens} from RAM, "
                  f"{s.store_tokens} from the cache), {s.generated_tokens} generated, "
                  f"{s.total_usec / 1000:.1f} ms]", file=sys.stderr)
    except WarmError as e:
        print(f"stream.py: {e.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
