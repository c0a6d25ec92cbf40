"""A local S3-compatible server for tests and benchmarks: moto's ThreadedMotoServer on
127.0.0.1 and a free port, in a process of its own (in the caller's process it would wait
for the GIL that a client thread blocked on its answer holds)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_server(log: Path, *, start_timeout_s: float = 120.0) -> Iterator[str]:
    """Run the server while the context is open; yields its endpoint URL."""
    port = _free_port()
    code = (
        "import threading; from moto.server import ThreadedMotoServer; "
        f"ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False).start(); threading.Event().wait()"
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield url
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; waits for the process either way."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def new_bucket(endpoint: str) -> str:
    """Create an empty bucket with a fresh name; returns the name."""
    import pyarrow.fs as pafs

    bucket = f"tf-{uuid.uuid4().hex[:12]}"
    host = endpoint.removeprefix("http://")
    pafs.S3FileSystem(
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        scheme="http",
        endpoint_override=host,
        allow_bucket_creation=True,
    ).create_dir(bucket)
    return bucket
