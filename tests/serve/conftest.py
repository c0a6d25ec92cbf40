"""A served suite in a real uvicorn server on a free port of this machine."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

TASKS = [
    {
        "id": "t/count",
        "domain": "terminal",
        "env_id": "bash",
        "instruction": "Write the number of lines of notes.txt to count.txt.",
        "files": {"/work/notes.txt": "a\nb\nc\n"},
        "check": 'test "$(cat /work/count.txt)" = 3',
        "max_steps": 6,
    },
    {"id": "t/free", "domain": "terminal", "env_id": "bash", "instruction": "Look around.", "check": "true"},
]


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({"tasks": TASKS}))
    return path


@pytest.fixture
def job_file(tmp_path: Path, suite: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump({"job_id": "served", "tasks": [suite.name], "max_steps": 6, "sandbox": {"backend": "local", "pids": 128}})
    )
    return path


@contextlib.contextmanager
def running(served, *, ws_max_size: int = 1 << 20, **kw):
    """``served`` behind a real server in a thread; yields its base URL."""
    import uvicorn

    from serve.app import build_app

    app = build_app(served, **kw)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_max_size=ws_max_size))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(60)
        served.close()
