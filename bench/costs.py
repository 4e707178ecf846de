"""What one streamed request costs each component in distributed mode: the inputs of the capacity note
(deploy/README.md, "Capacity"). Counted around a few streams: CPU seconds of the API node and of the worker
(/proc), Redis PUBLISH calls and commands (INFO), Postgres write transactions (transaction ids assigned) and
rows (counted in the bench's own database), per request and per generated token.

Redis and Postgres counters are server-wide: on a machine where other clients use them, the figures include
their traffic. Run the bench alone for the capacity note's inputs."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import openai
import redis

from app.testing.databases import connect
from bench.workloads import PROMPT, stream_once

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    # The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / CLOCK_TICKS


async def _postgres_counts(database_url: str) -> tuple[int, int]:
    """(the next transaction id, rows in every table of the bench's database). Read-only transactions take no
    transaction id, so the first counts the cluster's write transactions; reading it assigns none either."""
    connection = await connect(database_url)
    try:
        next_xid = int(await connection.fetchval("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"))
        tables = await connection.fetch(
            "SELECT quote_ident(tablename) AS name FROM pg_tables WHERE schemaname = 'public'"
        )
        rows = 0
        for table in tables:
            rows += int(await connection.fetchval(f"SELECT count(*) FROM {table['name']}"))
        return next_xid, rows
    finally:
        await connection.close()


@dataclass(frozen=True)
class Counters:
    api_cpu_s: float
    worker_cpu_s: float
    redis_publishes: int
    redis_commands: int
    postgres_write_transactions: int
    postgres_rows: int

    @classmethod
    def read(cls, api_pid: int, worker_pid: int, redis_url: str, database_url: str) -> Counters:
        with redis.Redis.from_url(redis_url) as connection:
            commandstats: dict[str, Any] = connection.info("commandstats")
            commands = int(connection.info("stats")["total_commands_processed"])
        next_xid, rows = asyncio.run(_postgres_counts(database_url))
        return cls(
            api_cpu_s=cpu_seconds(api_pid),
            worker_cpu_s=cpu_seconds(worker_pid),
            redis_publishes=int(commandstats.get("cmdstat_publish", {}).get("calls", 0)),
            redis_commands=commands,
            postgres_write_transactions=next_xid,
            postgres_rows=rows,
        )

    def __sub__(self, other: Counters) -> dict[str, float]:
        return {field.name: getattr(self, field.name) - getattr(other, field.name) for field in fields(self)}


def request_costs(
    client: openai.OpenAI,
    model: str,
    store: bool | None,
    *,
    api_pid: int,
    worker_pid: int,
    redis_url: str,
    database_url: str,
    requests: int = 4,
    tokens: int = 128,
) -> dict[str, Any]:
    """Streams `requests` responses of up to `tokens` tokens one after another; each counter's growth per
    request and per generated token (text deltas)."""
    before = Counters.read(api_pid, worker_pid, redis_url, database_url)
    generated = sum(stream_once(client, model, PROMPT, tokens, store).deltas for _ in range(requests))
    growth = Counters.read(api_pid, worker_pid, redis_url, database_url) - before
    return {
        "requests": requests,
        "tokens": generated,
        "per_request": {name: value / requests for name, value in growth.items()},
        "per_token": {name: value / generated for name, value in growth.items()},
    }
