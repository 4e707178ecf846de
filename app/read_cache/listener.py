"""What keeps every API node's read cache current on Postgres: LISTEN on a connection of its own for the
notification a trigger sends with every change of a `responses` row (migration 20261214_0024, delivered when the
change commits), each one dropping that response's entries. While it is down (Postgres restarted, the connection
killed) the cache checks every hit against the database, and it reconnects with backoff; it never dies silently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from app.read_cache.cache import ResponseJsonCache

logger = logging.getLogger(__name__)

#: The trigger's channel; its payload is the response's id, a space, and its tenant.
CHANNEL = "llama_responses_changed"
#: The longest wait between two attempts to reconnect (the wait doubles from FIRST_RETRY_S).
FIRST_RETRY_S = 0.1
MAX_RETRY_S = 5.0
CONNECT_TIMEOUT_S = 10.0
#: How often an idle listening connection is pinged, so that one lost without a word (a dead peer) is replaced.
KEEPALIVE_S = 5.0

Connect = Callable[..., Awaitable[Any]]


def connect_arguments(database_url: str) -> dict[str, Any]:
    """asyncpg.connect's arguments for a SQLAlchemy postgresql+asyncpg URL."""
    url = make_url(database_url)
    arguments: dict[str, Any] = url.translate_connect_args(username="user")
    arguments.update(url.query)
    return arguments


class ChangeListener:
    """LISTEN for changed responses and drop them from `cache` (see the module's note)."""

    def __init__(
        self,
        database_url: str,
        cache: ResponseJsonCache,
        *,
        keepalive_s: float = KEEPALIVE_S,
        connect: Connect = asyncpg.connect,
    ) -> None:
        self._arguments = connect_arguments(database_url)
        self._cache = cache
        self._keepalive_s = keepalive_s
        self._connect = connect
        #: The server process of the connection listening now (None: not listening): what an operator, or a
        #: test, terminates to cut it.
        self.backend_pid: int | None = None
        #: Set while listening, cleared while not: what a test waits on.
        self.connected = asyncio.Event()
        self.disconnected = asyncio.Event()
        self.disconnected.set()

    async def run_forever(self) -> None:
        """Listen, and listen again after each loss, until cancelled."""
        retry_s = FIRST_RETRY_S
        while True:
            try:
                await self._listen()
                retry_s = FIRST_RETRY_S  # it ran: a loss after a while is retried at once, as it was the first
            except Exception:
                logger.exception("the read cache's listener is down; reads check the database meanwhile")
            await asyncio.sleep(retry_s)
            retry_s = min(retry_s * 2, MAX_RETRY_S)

    async def _listen(self) -> None:
        connection = await self._connect(**self._arguments, timeout=CONNECT_TIMEOUT_S)
        lost = asyncio.Event()
        connection.add_termination_listener(lambda _: lost.set())
        try:
            await connection.add_listener(CHANNEL, self._on_notification)
            # Only now is every change notified: what was kept before is checked once more before it is trusted.
            self._cache.start_listening()
            self.backend_pid = connection.get_server_pid()
            self.disconnected.clear()
            self.connected.set()
            while not lost.is_set():
                try:
                    await asyncio.wait_for(lost.wait(), self._keepalive_s)
                except TimeoutError:
                    await connection.fetchval("SELECT 1", timeout=self._keepalive_s)
            logger.warning("the read cache's listener lost its connection; reconnecting")
        finally:
            self._cache.stop_listening()
            self.backend_pid = None
            self.connected.clear()
            self.disconnected.set()
            connection.terminate()

    def _on_notification(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        response_id, _, tenant = payload.partition(" ")
        self._cache.changed(tenant, response_id)
