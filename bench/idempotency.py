"""What an Idempotency-Key costs a create (not a test), on SQLite and Postgres: each figure against the same
create without a key, measured in the same run.

    .venv/bin/python -m bench.idempotency [--creates 200] [--no-postgres] [--json out.json]

In-process with the unit tests' fake model (an answer at once), so the figures are the API's own work: a JSON
create of a response and a conversation create, each sent one at a time without a key, with a new key (the key
claimed, then bound to the response in its transaction, or its answer sealed and kept), and again with that key
(the response read again, or the kept answer opened and sent), the three interleaved. Medians in milliseconds,
with the ratios to the create without a key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from app.db.migrations import upgrade_to_head
from app.main import create_app
from app.testing.databases import fresh_postgres_database
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation

RESPONSE = {"model": "fake-model", "input": "What is the capital of France?", "max_output_tokens": 16}
CONVERSATION = {"metadata": {"topic": "bench"}, "items": [{"role": "user", "content": "Hello there."}]}


async def _timed_ms(reply: Awaitable[httpx.Response]) -> float:
    started = time.perf_counter()
    answered = await reply
    assert answered.status_code == 200, answered.text
    return (time.perf_counter() - started) * 1000


async def _figures(client: httpx.AsyncClient, path: str, body: dict[str, Any], creates: int) -> dict[str, float]:
    """One create's figures: without a key, with a new key, and that key's repeat, interleaved (a change in the
    machine's load falls on all three alike)."""
    await client.post(path, json=body)  # warm: the first request builds what later ones reuse
    plain: list[float] = []
    keyed: list[float] = []
    repeated: list[float] = []
    for _ in range(creates):
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        plain.append(await _timed_ms(client.post(path, json=body)))
        keyed.append(await _timed_ms(client.post(path, json=body, headers=headers)))
        repeated.append(await _timed_ms(client.post(path, json=body, headers=headers)))
    name = path.rsplit("/", 1)[1]
    plain_ms, keyed_ms, repeat_ms = (statistics.median(times) for times in (plain, keyed, repeated))
    return {
        f"{name}_plain_ms": plain_ms,
        f"{name}_keyed_ms": keyed_ms,
        f"{name}_repeat_ms": repeat_ms,
        f"{name}_keyed_ratio": keyed_ms / plain_ms,
        f"{name}_repeat_ratio": repeat_ms / plain_ms,
    }


async def _measure(database_url: str, creates: int) -> dict[str, float]:
    settings = Settings(database_url=database_url, model_id="fake-model", batch_interval_s=3600.0, _env_file=None)
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    figures: dict[str, float] = {}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=60) as client:
            for path, body in (("/v1/responses", RESPONSE), ("/v1/conversations", CONVERSATION)):
                figures.update(await _figures(client, path, body, creates))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--creates", type=int, default=200)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as directory:
        results["sqlite"] = asyncio.run(_measure(f"sqlite+aiosqlite:///{directory}/bench.db", args.creates))
    if not args.no_postgres:
        with fresh_postgres_database() as url:
            upgrade_to_head(url)
            results["postgres"] = asyncio.run(_measure(url, args.creates))
    for database, figures in results.items():
        for name in ("responses", "conversations"):
            print(
                f"{database:8} {name:13} plain {figures[f'{name}_plain_ms']:6.2f} ms | keyed "
                f"{figures[f'{name}_keyed_ms']:6.2f} ms ({figures[f'{name}_keyed_ratio']:.2f}x) | repeat "
                f"{figures[f'{name}_repeat_ms']:6.2f} ms ({figures[f'{name}_repeat_ratio']:.2f}x)"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
