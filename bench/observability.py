"""What observability costs a request: GET /v1/responses/{id} in-process (httpx's ASGI transport, the fake model),
with the request middleware taken out (the baseline), as shipped (metrics, request ids), and with tracing on
(in-memory exporter). Rounds alternate between the apps; the median round of each is printed, as a ratio to the
baseline's. Then the middleware alone around an ASGI app that answers at once: its own cost a request, which a
loaded machine's noise hides in the first figure.

    python -m bench.observability [--requests 500] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import cast

import httpx
from fastapi import FastAPI
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import Settings
from app.main import create_app
from app.observability import tracing
from app.observability.requests import RequestObservation
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation


async def round_s(client: httpx.AsyncClient, path: str, requests: int) -> float:
    started = time.perf_counter()
    for _ in range(requests):
        reply = await client.get(path)
        assert reply.status_code == 200
    return (time.perf_counter() - started) / requests


async def _answer(scope: Scope, receive: Receive, send: Send) -> None:
    scope["route"], scope["path_params"] = object(), {"response_id": "resp_1"}  # as the router leaves them
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def middleware_overhead_s(calls: int) -> float:
    """Median of three: the middleware around `_answer` minus `_answer` alone, a request."""

    async def discard(_: Message) -> None:
        return None

    async def nothing() -> Message:
        return {"type": "http.request"}

    async def run(target: ASGIApp) -> float:
        started = time.perf_counter()
        for _ in range(calls):
            scope: Scope = {"type": "http", "method": "GET", "path": "/v1/responses/resp_1", "headers": []}
            await target(scope, nothing, discard)
        return (time.perf_counter() - started) / calls

    observed = RequestObservation(_answer)
    return statistics.median([await run(observed) - await run(_answer) for _ in range(3)])


async def measure(folder: Path, requests: int, rounds: int) -> dict[str, float]:
    def build(name: str, *, observed: bool = True) -> FastAPI:
        settings = Settings(database_url=f"sqlite+aiosqlite:///{folder / name}.db", model_id="m", _env_file=None)
        built = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
        if not observed:  # the middleware stack is built at the first request: take ours out before it
            kept = [entry for entry in built.user_middleware if cast(object, entry.cls) is not RequestObservation]
            built.user_middleware = kept
        return built

    # Tracing is process-wide once on: the traced app is built last, after the others.
    apps = {"baseline": build("baseline", observed=False), "metrics": build("metrics")}
    tracing.configure_tracing("bench", InMemorySpanExporter())
    apps["metrics + tracing"] = build("traced")
    times: dict[str, list[float]] = {name: [] for name in apps}
    async with (
        apps["baseline"].router.lifespan_context(apps["baseline"]),
        apps["metrics"].router.lifespan_context(apps["metrics"]),
        apps["metrics + tracing"].router.lifespan_context(apps["metrics + tracing"]),
    ):
        clients = {
            name: httpx.AsyncClient(transport=httpx.ASGITransport(app=built), base_url="http://bench")
            for name, built in apps.items()
        }
        try:
            paths = {}
            for name, client in clients.items():
                created = (await client.post("/v1/responses", json={"input": "hi"})).json()
                paths[name] = f"/v1/responses/{created['id']}"
                await round_s(client, paths[name], requests // 10)  # warm up
            for _ in range(rounds):
                for name, client in clients.items():
                    times[name].append(await round_s(client, paths[name], requests))
        finally:
            for client in clients.values():
                await client.aclose()
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        medians = asyncio.run(measure(Path(folder), args.requests, args.rounds))
    baseline = medians["baseline"]
    for name, seconds in medians.items():
        print(f"{name:>18}: {seconds * 1e6:7.0f} us a GET  ({seconds / baseline:.2f} x baseline)")
    overhead = asyncio.run(middleware_overhead_s(20_000))
    print(f"{'middleware alone':>18}: {overhead * 1e6:7.1f} us a request ({overhead / baseline:.3f} of a GET)")


if __name__ == "__main__":
    main()
