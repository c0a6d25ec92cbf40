"""A simulated Android device for dry runs and tests: an adbd-protocol TCP server over a
small simulated phone (launcher, Settings, Contacts, Notes), reached through the real adb
server with ``adb connect 127.0.0.1:PORT``. ``trajforge android sim -n 2`` starts two.

    with Simulator.start(adb_port=5037) as sim:   # a process; sim.serial == "127.0.0.1:PORT"
        ...
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from schemas.errors import TrajforgeError


class Simulator:
    """One simulated device in its own process, connected to the adb server on ``adb_port``."""

    def __init__(self, proc: subprocess.Popen, port: int, adb_port: int) -> None:
        self.proc, self.port, self.adb_port = proc, port, adb_port
        self.serial = f"127.0.0.1:{port}"

    @classmethod
    def start(cls, adb_port: int, port: int = 0, timeout: float = 15.0) -> Simulator:
        proc = subprocess.Popen(
            [sys.executable, "-m", "collectors.android.sim", "--port", str(port), "--exit-with-stdin"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
        )
        line = proc.stdout.readline()  # "listening 127.0.0.1:PORT"
        if not line.startswith("listening "):
            proc.kill()
            raise TrajforgeError(f"the Android simulator did not start (exit {proc.poll()})")
        sim = cls(proc, int(line.rsplit(":", 1)[1]), adb_port)
        sim.connect(timeout)
        return sim

    def connect(self, timeout: float = 15.0) -> None:
        """``adb connect`` until the adb server lists this device as ``device``."""
        from collectors.android.adb import adb

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            adb(self.adb_port, "connect", self.serial)
            if f"{self.serial}\tdevice" in adb(self.adb_port, "devices"):
                return
            time.sleep(0.2)
        raise TrajforgeError(f"adb did not see the simulator {self.serial} within {timeout:.0f} s")

    def kill(self) -> None:
        """Kill the device abruptly (a phone that dies, a cable pulled)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        from collectors.android.adb import adb

        self.kill()
        adb(self.adb_port, "disconnect", self.serial)

    def __enter__(self) -> Simulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
