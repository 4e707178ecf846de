"""Readiness: the database answers, the queue answers, and something can generate."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from app.runtime import Runtime

READY_CHECK_TIMEOUT_S = 3.0


async def _database(runtime: Runtime) -> bool:
    async with runtime.sessionmaker() as session:
        await session.execute(text("SELECT 1"))
    return True


async def readiness(runtime: Runtime) -> tuple[bool, dict[str, Any]]:
    checks: dict[str, Any] = {}
    for name, check in (("database", _database), ("workers", lambda runtime: runtime.queue.workers_alive())):
        try:
            checks[name] = bool(await asyncio.wait_for(check(runtime), READY_CHECK_TIMEOUT_S))
        except Exception as error:
            checks[name] = False
            checks[f"{name}_error"] = str(error) or type(error).__name__
    ready = checks["database"] and checks["workers"]
    return ready, {"status": "ready" if ready else "not ready", "checks": checks}
