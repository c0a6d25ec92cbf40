"""The device link: the adb server (Debian's ``adb``) and adbutils, its maintained pure-
Python client, with bounded waits and typed errors.

Every shell command goes through ``Device.shell``, which keeps the exact command line (the
environment records it with the step) and its time. A device that is gone (unplugged,
emulator or simulator killed, adb's "device offline" / "not found") raises
``DeviceOffline``; a command past its timeout ``DeviceTimeout``; a UI dump that keeps
failing (AndroidWorld's most reported fault: "could not get idle state", "null root node")
``DumpError``, after retries with exponential backoff. All are ``EnvError``: the runner
retries the episode and records it as failed after its retries.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from typing import Any

from collectors.env import EnvError

DUMP_PATH = "/sdcard/window_dump.xml"


class DeviceOffline(EnvError):
    """The device is not reachable through adb any more."""


class DeviceTimeout(EnvError):
    """A command on the device did not finish in time."""


class DumpError(EnvError):
    """``uiautomator dump`` kept failing."""


def adb(port: int, *args: str, timeout: float = 30.0) -> str:
    """Run the adb command-line tool against the server on ``port``; its output."""
    try:
        r = subprocess.run(["adb", "-P", str(port), *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise EnvError("adb is not installed (Debian: apt-get install adb; see scripts/install-system-deps.sh)") from None
    except subprocess.TimeoutExpired:
        raise DeviceTimeout(f"adb {' '.join(args)} did not finish within {timeout:.0f} s") from None
    return r.stdout + r.stderr


def connect(serial: str, port: int, timeout: float = 15.0) -> Any:
    """Start the adb server if needed, ``adb connect`` a TCP serial, wait until it is a device."""
    import adbutils

    adb(port, "start-server")
    client = adbutils.AdbClient(host="127.0.0.1", port=port, socket_timeout=timeout)
    deadline = time.monotonic() + timeout
    state = "absent"
    while time.monotonic() < deadline:
        if ":" in serial:
            adb(port, "connect", serial, timeout=timeout)
        state = next((d.state for d in client.list() if d.serial == serial), "absent")
        if state == "device":
            return client.device(serial)
        time.sleep(0.3)
    raise DeviceOffline(f"device {serial}: {state} (not ready within {timeout:.0f} s; `adb -P {port} devices` lists it?)")


class Device:
    """One device by serial, its shell commands timed and logged."""

    def __init__(self, serial: str, port: int = 5037, timeout: float = 30.0) -> None:
        self.serial, self.port, self.timeout = serial, port, timeout
        self.device = connect(serial, port, timeout=min(timeout, 15.0))
        self.log: list[str] = []  # the exact commands since the last ``take_log``

    def shell(self, command: str | list[str], timeout: float | None = None) -> str:
        import adbutils

        line = command if isinstance(command, str) else shlex.join(command)
        self.log.append(line)
        try:
            return self.device.shell(line, timeout=timeout or self.timeout)
        except adbutils.AdbTimeout:
            raise DeviceTimeout(f"device {self.serial}: {line!r} did not finish within {timeout or self.timeout:.0f} s") from None
        except (adbutils.AdbError, OSError) as exc:
            raise DeviceOffline(f"device {self.serial} is offline or gone ({exc}) running {line!r}") from None

    def push(self, data: bytes, path: str) -> None:
        self.log.append(f"push {path} ({len(data)} bytes)")
        try:
            self.device.sync.push(data, path)
        except Exception as exc:  # adbutils raises its own and socket errors here
            raise DeviceOffline(f"device {self.serial}: push to {path} failed: {exc}") from None

    def take_log(self) -> list[str]:
        log, self.log = self.log, []
        return log

    def dump(self, retries: int = 3, backoff_s: float = 0.2) -> tuple[str, int]:
        """The UI hierarchy as uiautomator XML, retried with backoff: (xml, attempts)."""
        out = ""
        for attempt in range(1, retries + 2):
            out = self.shell(f"uiautomator dump {DUMP_PATH} >/dev/null && cat {DUMP_PATH}")
            start = out.find("<?xml")
            if start >= 0 and out.rstrip().endswith("</hierarchy>"):
                return out[start:], attempt
            if attempt <= retries:
                time.sleep(backoff_s * 2 ** (attempt - 1))
        raise DumpError(f"device {self.serial}: uiautomator dump failed {retries + 1} times: {out.strip()[:200]!r}")
