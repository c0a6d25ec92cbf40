"""A client of ``trajforge serve``: openenv-core's own ``GenericEnvClient``, plus the bearer
token a server beyond loopback asks for (openenv-core's client sends no headers)."""

from __future__ import annotations

from typing import Any

from openenv.core.generic_client import GenericEnvClient
from websockets.asyncio.client import connect as ws_connect


class TrajforgeClient(GenericEnvClient):
    """``GenericEnvClient`` (dict actions and observations) that authenticates with ``token``.

    async with TrajforgeClient("http://127.0.0.1:8000", token=...) as env:
        r = await env.reset(task_id="terminal/count-lines", policy="my-agent")
        r = await env.step({"action": "run", "command": "ls"})
    """

    def __init__(self, base_url: str, *, token: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._token = token

    async def connect(self) -> TrajforgeClient:
        if self._token is None:
            await super().connect()
            return self
        if self._ws is None:
            try:
                self._ws = await ws_connect(
                    self._ws_url,
                    open_timeout=self._connect_timeout,
                    max_size=self._max_message_size,
                    additional_headers={"Authorization": f"Bearer {self._token}"},
                    proxy=None,
                )
            except Exception as e:
                raise ConnectionError(f"Failed to connect to {self._ws_url}: {e}") from e
        return self
