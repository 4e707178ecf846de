"""Event writes (issue 14, item 5), on Postgres; every figure against one event per transaction in the same run.

    .venv/bin/python -m bench.event_writes [--tokens 200] [--streams 3] [--writers 1,8,32] [--batches 6,32]
                                           [--seconds 3] [--no-server] [--json out.json]

1. Database writes per generated token of a background stream (`background` + `stream`, the one kind whose
   events are stored): an embedded server (the shipped model, 2 threads) on a fresh Postgres, as shipped (batches
   of EVENT_FLUSH_MS / EVENT_FLUSH_EVENTS) and with batches of one event (how it stored them before). The
   transactions that stored a response's events are counted from its event rows' xmin: nothing in the server is
   hooked. (Besides those, a run renews its lease every RESPONSES_LEASE_S / 3: under 0.01 writes a token.)
   Tokens further apart than EVENT_FLUSH_MS are a batch each: on a loaded machine whose model crawls, both modes
   show one write a token. Hence also the same in-process with the unit tests' fake model at a fixed token rate
   (--fake-token-ms, 8.7 ms: this CPU's ~115 tokens/s), which the machine's load does not change.
2. The sustained event rate one Postgres takes: N concurrent writers, each a run of its own response on its own
   connection, store events in the server's transaction shape (lease renewal + progress step + events) in
   batches of B; events/s and transactions/s for each (N, B), and the ratio to B = 1 at the same N. B = 6 is a
   batch on this CPU (~115 tokens/s x 50 ms), 32 the cap (a fast GPU, or a database that lags).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from app.config import Settings
from app.db.base import utc_now
from app.db.migrations import upgrade_to_head
from app.db.models import ResponseRow
from app.jobs import event_batches
from app.jobs import repository as jobs
from app.lifecycle.transitions import Holder
from app.main import create_app
from app.testing.databases import fresh_postgres_database
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from app.testing.servers import free_port
from app.testing.sse import parse_sse

THREADS = 2
PROMPT = "Write a long story about a dragon who learns to bake bread."
STARTUP_TIMEOUT_S = 120
#: One output_text.delta as the server stores it (a token's worth of text).
DELTA = {
    "type": "response.output_text.delta",
    "item_id": "msg_0123456789abcdef0123456789abcdef",
    "output_index": 0,
    "content_index": 0,
    "delta": " bread",
    "logprobs": [],
}


@contextmanager
def server_with_batches(database_url: str, log: Path, flush_events: int | None) -> Iterator[str]:
    """An embedded `llama-responses serve` (this module as its entry point, to set the batch size first: None
    keeps the shipped one); its base URL."""
    port = free_port()
    env = {**os.environ, "RESPONSES_DATABASE_URL": database_url, "RESPONSES_N_THREADS": str(THREADS)}
    size = [] if flush_events is None else ["--as-server-with-batches-of", str(flush_events)]
    command = [
        sys.executable,
        "-m",
        "bench.event_writes",
        *size,
        "serve",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    with log.open("ab") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start:\n{log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{base_url}/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=30)


async def _event_transactions(database_url: str, response_id: str) -> tuple[int, int]:
    """(events stored, transactions that stored them) for one response."""
    connection = await asyncpg.connect(database_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        row = await connection.fetchrow(
            "SELECT count(*) AS events, count(DISTINCT xmin::text) AS writes FROM response_events"
            " WHERE response_id = $1",
            response_id,
        )
    finally:
        await connection.close()
    assert row is not None
    return int(row["events"]), int(row["writes"])


def stream_writes(database_url: str, base_url: str, tokens: int, streams: int) -> dict[str, float]:
    """Background streams through the server: event-storing transactions per output token, summed over them."""
    events = writes = output_tokens = 0
    seconds = 0.0
    for index in range(streams):
        body = {
            "input": f"{PROMPT} ({index})",
            "background": True,
            "stream": True,
            "max_output_tokens": tokens,
            "temperature": 0,
        }
        started = time.perf_counter()
        streamed = parse_sse(httpx.post(f"{base_url}/v1/responses", json=body, timeout=600).text)
        seconds += time.perf_counter() - started
        final = streamed[-1]["response"]
        assert final["status"] in ("completed", "incomplete"), final
        stored, transactions = asyncio.run(_event_transactions(database_url, final["id"]))
        assert stored == len(streamed), (stored, len(streamed))
        events, writes, output_tokens = (
            events + stored,
            writes + transactions,
            output_tokens + final["usage"]["output_tokens"],
        )
    return {
        "output_tokens": output_tokens,
        "events": events,
        "event_writes": writes,
        "writes_per_token": writes / output_tokens,
        "events_per_write": events / writes,
        "tokens_per_s": output_tokens / seconds,
    }


def bench_server(tokens: int, streams: int, directory: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for label, size in (("one_event_per_write", 1), ("batched", None)):
        with fresh_postgres_database() as url:
            upgrade_to_head(url)
            with server_with_batches(url, directory / f"server-{label}.log", size) as base_url:
                figures[label] = stream_writes(url, base_url, tokens, streams)
    figures["writes_ratio_batched_to_one"] = (
        figures["batched"]["writes_per_token"] / figures["one_event_per_write"]["writes_per_token"]
    )
    figures["tokens_per_s_ratio_batched_to_one"] = (
        figures["batched"]["tokens_per_s"] / figures["one_event_per_write"]["tokens_per_s"]
    )
    return figures


async def _fake_stream_writes(database_url: str, token_ms: float, tokens: int, streams: int) -> dict[str, float]:
    """As stream_writes, in-process with the fake model saying a word every `token_ms`."""
    runner = FakeRunner(delay_s=token_ms / 1000)
    runner.reply = [f"w{index}" for index in range(tokens)]
    settings = Settings(database_url=database_url, model_id="fake-model", _env_file=None)
    app = create_app(settings, fake_generation(FakeRenderer(), runner))
    events = writes = 0
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=600) as client:
            for _ in range(streams):
                body = {"input": PROMPT, "background": True, "stream": True}
                streamed = parse_sse((await client.post("/v1/responses", json=body)).text)
                stored, transactions = await _event_transactions(database_url, streamed[-1]["response"]["id"])
                events, writes = events + stored, writes + transactions
    return {"events": events, "event_writes": writes, "writes_per_token": writes / (tokens * streams)}


def bench_fake_model(token_ms: float, tokens: int, streams: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"token_ms": token_ms}
    shipped = event_batches.EVENT_FLUSH_EVENTS
    with fresh_postgres_database() as url:
        upgrade_to_head(url)
        try:
            event_batches.EVENT_FLUSH_EVENTS = 1
            figures["one_event_per_write"] = asyncio.run(_fake_stream_writes(url, token_ms, tokens, streams))
        finally:
            event_batches.EVENT_FLUSH_EVENTS = shipped
        figures["batched"] = asyncio.run(_fake_stream_writes(url, token_ms, tokens, streams))
    figures["writes_ratio_batched_to_one"] = (
        figures["batched"]["writes_per_token"] / figures["one_event_per_write"]["writes_per_token"]
    )
    return figures


async def _writer(
    sessionmaker: async_sessionmaker[AsyncSession], response_id: str, batch: int, deadline: float
) -> tuple[int, int]:
    """One run storing its events in batches of `batch`, as JobExecution does, until `deadline`: (events, writes)."""
    number = position = 0
    holder = Holder(owner="bench", attempt=1)
    while time.monotonic() < deadline:
        payloads = [{**DELTA, "sequence_number": number + offset} for offset in range(batch)]
        step = jobs.ProgressStep(position=position, pieces=[" bread"] * batch, ids=[])
        async with sessionmaker() as session, session.begin():
            held, _, _ = await jobs.renew(session, response_id, holder=holder, lease_s=15.0, progress=step)
            assert held
            await jobs.insert_events(session, response_id, payloads)
        number, position = number + batch, position + 1
    return number, position


async def _event_rate(database_url: str, writers: int, batch: int, seconds: float) -> dict[str, float]:
    engine = create_async_engine(database_url, pool_size=writers, max_overflow=0)
    sessionmaker = async_sessionmaker(engine, expire_on_commit=False)
    ids = [f"resp_bench_{writers}_{batch}_{index}" for index in range(writers)]
    try:
        async with sessionmaker() as session, session.begin():
            session.add_all(
                ResponseRow(
                    id=response_id,
                    tenant="bench",
                    status="in_progress",
                    model="bench",
                    background=True,
                    stream=True,
                    params={},
                    lease_owner="bench",
                    attempts=1,
                    lease_expires_at=utc_now() + timedelta(hours=1),
                )
                for response_id in ids
            )
        deadline = time.monotonic() + seconds
        started = time.monotonic()
        done = await asyncio.gather(*(_writer(sessionmaker, response_id, batch, deadline) for response_id in ids))
        elapsed = time.monotonic() - started
    finally:
        await engine.dispose()
    events, writes = sum(count for count, _ in done), sum(count for _, count in done)
    return {"events_per_s": events / elapsed, "writes_per_s": writes / elapsed}


def bench_event_rate(writer_counts: list[int], batches: list[int], seconds: float) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with fresh_postgres_database() as url:
        upgrade_to_head(url)
        for writers in writer_counts:
            row: dict[str, Any] = {}
            for batch in sorted({1, *batches}):
                row[f"batch_{batch}"] = asyncio.run(_event_rate(url, writers, batch, seconds))
            for batch in batches:
                row[f"batch_{batch}_over_1"] = row[f"batch_{batch}"]["events_per_s"] / row["batch_1"]["events_per_s"]
            figures[f"{writers}_writers"] = row
    return figures


def _serve_with_batches(argv: list[str]) -> int:
    """Run the CLI with batches of `argv[0]` events (and no timer wait): the baseline server."""
    from app.cli import main as cli

    event_batches.EVENT_FLUSH_EVENTS = int(argv[0])
    return cli(argv[1:])


def main() -> None:
    if sys.argv[1:2] == ["--as-server-with-batches-of"]:
        sys.exit(_serve_with_batches(sys.argv[2:]))
    if sys.argv[1:2] == ["serve"]:
        from app.cli import main as cli

        sys.exit(cli(sys.argv[1:]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--writers", default="1,8,32")
    parser.add_argument("--batches", default="6,32")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--fake-token-ms", type=float, default=8.7)
    parser.add_argument("--no-server", action="store_true", help="no real model: the event rate and the fake model")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {
        "flush_ms": event_batches.EVENT_FLUSH_MS,
        "flush_events": event_batches.EVENT_FLUSH_EVENTS,
    }
    writers = [int(count) for count in args.writers.split(",")]
    batches = [int(size) for size in args.batches.split(",")]
    results["event_rate"] = bench_event_rate(writers, batches, args.seconds)
    print(json.dumps({"event_rate": results["event_rate"]}, indent=2), flush=True)
    results["fake_model_writes"] = bench_fake_model(args.fake_token_ms, args.tokens, args.streams)
    print(json.dumps({"fake_model_writes": results["fake_model_writes"]}, indent=2), flush=True)
    if not args.no_server:
        with tempfile.TemporaryDirectory() as directory:
            results["stream_writes"] = bench_server(args.tokens, args.streams, Path(directory))
        print(json.dumps({"stream_writes": results["stream_writes"]}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
