"""A local S3-compatible server (moto in server mode) and an empty bucket per test."""

from __future__ import annotations

import pytest

from tests.s3server import ENV, moto_server, new_bucket


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory):
    """A real HTTP S3 endpoint on 127.0.0.1 for the session (``tests.s3server``)."""
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as url:
        yield url


@pytest.fixture
def s3_store(moto_endpoint, monkeypatch, tmp_path):
    """``s3://<new bucket>/store``, with pyarrow (and subprocesses) pointed at the local server
    through the usual AWS_* variables, and the store's local state folder under tmp_path."""
    for key, value in {**ENV, "AWS_ENDPOINT_URL": moto_endpoint}.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TRAJFORGE_STATE_DIR", str(tmp_path / "state"))
    return f"s3://{new_bucket(moto_endpoint)}/store"
