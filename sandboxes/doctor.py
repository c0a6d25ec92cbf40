"""``trajforge sandboxes doctor``: start a real sandbox on each backend and run a command."""

from __future__ import annotations

import time

from sandboxes.base import SandboxConfig, SandboxError


def check_backend(backend: str) -> tuple[bool, str]:
    from sandboxes import make_sandbox

    config = SandboxConfig(backend=backend, run_id="doctor")
    try:
        sb = make_sandbox(config)
        t0 = time.monotonic()
        with sb.start():
            start_ms = (time.monotonic() - t0) * 1000
            t1 = time.monotonic()
            r = sb.exec("true", timeout=20)
            exec_ms = (time.monotonic() - t1) * 1000
            if r.exit_code != 0:
                return False, f"{backend}: unavailable (`true` exited {r.exit_code}: {r.stderr.strip()[:120]})"
            if backend == "docker":
                from sandboxes.engine import engine_version

                what = f"{engine_version(sb.host)} at {sb.host}, image {config.image}, disk: {sb.describe()['disk']}"
            else:
                info = sb.describe()
                what = f"bwrap, {info['limits']}, disk: {info['disk']}, root: {info['root']}"
        return True, f"{backend}: ok ({what}, start {start_ms:.0f} ms, exec {exec_ms:.0f} ms)"
    except SandboxError as exc:
        return False, f"{backend}: unavailable ({exc})"
    except Exception as exc:  # a doctor reports, it does not crash
        return False, f"{backend}: unavailable ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"


def doctor() -> list[tuple[bool, str]]:
    return [check_backend(b) for b in ("docker", "local")]
