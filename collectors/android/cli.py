"""``trajforge android sim``: start simulated Android devices and connect them to the adb
server, for dry runs of Android jobs without an emulator::

    trajforge android sim -n 2          # prints the serials; Ctrl-C stops them
    trajforge collect examples/jobs/android-sim.yaml --store store/   # starts its own
"""

from __future__ import annotations

import os
import signal
import time
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Android environment: simulated devices for dry runs.")


@app.command("sim")
def sim(
    n: Annotated[int, typer.Option("-n", help="How many simulated devices.")] = 1,
    adb_port: Annotated[int | None, typer.Option(help="adb server port (default: $ANDROID_ADB_SERVER_PORT or 5037).")] = None,
    seconds: Annotated[float, typer.Option(help="Stop after this long (0: until interrupted).")] = 0.0,
) -> None:
    """Start N simulated devices, `adb connect` them, print their serials, serve until stopped."""
    from collectors.android.adb import adb
    from collectors.android.sim import Simulator

    port = adb_port or int(os.environ.get("ANDROID_ADB_SERVER_PORT", "5037"))
    adb(port, "start-server")
    sims = []
    try:
        for _ in range(n):
            sims.append(Simulator.start(port))
            typer.echo(f"simulated device {sims[-1].serial} (adb -P {port} -s {sims[-1].serial} shell ...)")
        typer.echo(f"serials: [{', '.join(s.serial for s in sims)}]")
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop cleanly on kill as on Ctrl-C
        deadline = time.monotonic() + seconds if seconds else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        for s in sims:
            s.stop()
