"""``python -m collectors.android.sim --port PORT``: serve one simulated device (prints
``listening 127.0.0.1:PORT`` once ready); ``trajforge android sim`` starts and connects several."""

from __future__ import annotations

import argparse
import os
import sys
import threading

from collectors.android.sim.adbd import serve
from collectors.android.sim.phone import Phone


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: any free port)")
    parser.add_argument("--exit-with-stdin", action="store_true", help="exit when stdin closes (its parent died)")
    args = parser.parse_args(argv)
    if args.exit_with_stdin:  # a simulator never outlives the environment that started it
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    phone, lock = Phone(), threading.Lock()

    def shell(command: str) -> bytes:
        with lock:  # streams run in threads; the phone is one state machine
            return phone.shell(command)

    serve(args.port, shell, phone.files, ready=lambda port: print(f"listening 127.0.0.1:{port}", flush=True))


if __name__ == "__main__":
    sys.exit(main())
