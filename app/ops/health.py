"""Readiness of an API node (its database and queue answer) and, apart from it, whether workers are there."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import text

from app.runtime import Runtime

READY_CHECK_TIMEOUT_S = 3.0


async def _database(runtime: Runtime) -> bool:
    async with runtime.database.read() as session:
        await session.execute(text("SELECT 1"))
    return True


async def _queue(runtime: Runtime) -> bool:
    await runtime.queue.ping()
    return True


async def _workers(runtime: Runtime) -> bool:
    return await runtime.queue.live_workers() > 0


async def _models(runtime: Runtime) -> dict[str, Any]:
    """Per served model: how many live workers serve it."""
    availability = await runtime.queue.availability(runtime.models.ids)
    return {model: state.live_workers for model, state in availability.items()}


async def _check(runtime: Runtime, name: str, check: Callable[[Runtime], Awaitable[bool]]) -> dict[str, Any]:
    try:
        return {name: bool(await asyncio.wait_for(check(runtime), READY_CHECK_TIMEOUT_S))}
    except Exception as error:
        return {name: False, f"{name}_error": str(error) or type(error).__name__}


async def readiness(runtime: Runtime) -> tuple[bool, dict[str, Any]]:
    """Ready when what this node itself needs answers: the database and the queue (Redis).

    NOTE: workers are reported, not required: a node without workers still serves reads, cancels and background
    creates (they wait in the queue), so an orchestrator must not take every API node out of service when the
    workers are down. Foreground creates are refused with a 503 then (submission checks per request).
    """
    checks: dict[str, Any] = {}
    for name, check in (("database", _database), ("queue", _queue), ("workers", _workers)):
        checks.update(await _check(runtime, name, check))
    ready = bool(checks["database"] and checks["queue"])
    body: dict[str, Any] = {"status": "ready" if ready else "not ready", "checks": checks}
    try:
        body["model_workers"] = await asyncio.wait_for(_models(runtime), READY_CHECK_TIMEOUT_S)
    except Exception as error:
        body["model_workers_error"] = str(error) or type(error).__name__
    return ready, body


async def worker_availability(runtime: Runtime) -> tuple[bool, dict[str, Any]]:
    """Whether a worker can take a foreground generation now (always, in embedded mode), per served model:
    available when every model has one."""
    try:
        availability = await asyncio.wait_for(runtime.queue.availability(runtime.models.ids), READY_CHECK_TIMEOUT_S)
    except Exception as error:
        failed = {"workers": False, "workers_error": str(error) or type(error).__name__}
        return False, {"status": "unavailable", "models": {model: failed for model in runtime.models.ids}}
    models = {
        model: {"workers": state.live_workers > 0, "live_workers": state.live_workers}
        for model, state in availability.items()
    }
    available = all(model["workers"] for model in models.values())
    return available, {"status": "available" if available else "unavailable", "models": models}
