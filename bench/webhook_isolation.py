"""Webhook isolation figures (not a test): one tenant's delivery latency alone, and beside another tenant's 48
endpoints at a receiver that never answers, on SQLite and Postgres (issue 37's goal: within 1 s of alone).

    .venv/bin/python -m bench.webhook_isolation [--rounds 5] [--hanging 48] [--no-postgres] [--json out.json]

The app runs in-process (the unit tests' fake model: no generation runs) with the default delivery settings
(a round every RESPONSES_WEBHOOK_DELIVERY_INTERVAL_S = 1 s, a 10 s attempt timeout, 16 slots a tenant); the
events are written into the outbox as a response's end writes them. The hostile tenant's event (one delivery to
each of its endpoints) is written first, then, once its receiver holds requests, the other tenant's; the figure
is the time from the other tenant's commit to its receiver's request, against the same with no hostile tenant
(measured in the same run). Before this change the round took 16 due deliveries and waited for all of them:
27.3 s (SQLite) / 9.5 s (Postgres) instead of 0.7 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from app.db.migrations import upgrade_to_head
from app.db.session import Database
from app.main import create_app
from app.testing.databases import fresh_postgres_database
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from app.testing.receiver import Receiver, running_receiver
from app.webhooks import repository
from app.webhooks.outbox import record_event


@asynccontextmanager
async def _app(database_url: str, hanging: int) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    settings = Settings(
        database_url=database_url,
        model_id="m",
        api_keys="hostile,other",
        outbound_allowed_hosts="127.0.0.1:*",
        webhook_max_endpoints_per_tenant=hanging + 1,
        batch_interval_s=3600,
        _env_file=None,
    )
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(
                transport=transport, base_url="http://b", headers={"authorization": "Bearer hostile"}
            ) as h,
            httpx.AsyncClient(transport=transport, base_url="http://b", headers={"authorization": "Bearer other"}) as o,
        ):
            yield h, o


async def _endpoint(client: httpx.AsyncClient, url: str, name: str) -> str:
    reply = await client.post(
        "/v1/webhook_endpoints", json={"name": name, "url": url, "event_types": ["response.completed"]}
    )
    reply.raise_for_status()
    return str(reply.json()["id"])


async def _record(database: Database, endpoint_id: str, object_id: str) -> None:
    async with database.transaction() as session:
        [endpoint] = (await repository.endpoints_by_id(session, [endpoint_id])).values()
        await record_event(session, tenant=endpoint.tenant, event_type="response.completed", object_id=object_id)


async def _arrival_s(receiver: Receiver, count: int, started: float, bound_s: float = 120) -> float:
    while len(receiver.requests) < count:
        if time.monotonic() - started > bound_s:
            raise TimeoutError(f"no delivery within {bound_s} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - started


async def measure(database_url: str, rounds: int, hanging: int) -> dict[str, Any]:
    """The other tenant's delivery latencies alone, then beside the hanging endpoints (seconds)."""
    database = Database.connect(database_url)
    alone: list[float] = []
    beside: list[float] = []
    try:
        with running_receiver() as stuck, running_receiver() as answering:
            stuck.hold_next, stuck.hold_s = 1_000_000, 600
            async with _app(database_url, hanging) as (hostile, other):
                theirs = await _endpoint(other, answering.url, "other")
                for index in range(rounds):
                    await asyncio.sleep(0.37 * index % 1.0)  # a different phase of the delivery interval
                    started = time.monotonic()
                    await _record(database, theirs, f"resp_alone_{index}")
                    alone.append(await _arrival_s(answering, len(answering.requests) + 1, started))
                mine = [await _endpoint(hostile, stuck.url, f"hang-{index}") for index in range(hanging)]
                for index in range(rounds):
                    held = len(stuck.requests)
                    await _record(database, mine[0], f"resp_hostile_{index}")
                    await _arrival_s(stuck, held + 1, time.monotonic())
                    await asyncio.sleep(0.37 * index % 1.0)
                    started = time.monotonic()
                    await _record(database, theirs, f"resp_beside_{index}")
                    beside.append(await _arrival_s(answering, len(answering.requests) + 1, started))
                held_at_end = len(stuck.requests)
            stuck.released.set()
    finally:
        await database.dispose()
    return {
        "alone_s": alone,
        "beside_s": beside,
        "alone_median_s": statistics.median(alone),
        "beside_median_s": statistics.median(beside),
        "beside_max_s": max(beside),
        "hanging_requests_held": held_at_end,
    }


def _report(name: str, figures: dict[str, Any]) -> None:
    alone, beside = figures["alone_median_s"], figures["beside_median_s"]
    print(
        f"{name:9s} alone {alone:5.2f} s   beside {figures['hanging_requests_held']} hung requests "
        f"{beside:5.2f} s (max {figures['beside_max_s']:.2f})   difference {beside - alone:+.2f} s   "
        f"ratio {beside / alone:.2f}   goal: difference < 1 s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hanging", type=int, default=48)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite+aiosqlite:///{directory}/bench.db"
        upgrade_to_head(url)
        results["sqlite"] = asyncio.run(measure(url, args.rounds, args.hanging))
        _report("SQLite", results["sqlite"])
    if not args.no_postgres:
        with fresh_postgres_database() as url:
            upgrade_to_head(url)
            results["postgres"] = asyncio.run(measure(url, args.rounds, args.hanging))
            _report("Postgres", results["postgres"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
