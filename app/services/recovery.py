"""Responses whose generation can never finish: how they are ended."""

from __future__ import annotations

from app.db.repositories import responses as repository
from app.runtime import Runtime

LOST_GENERATION_ERROR = {"code": "server_error", "message": "The server stopped before this response finished."}


async def fail_unfinished_responses(runtime: Runtime) -> int:
    """Embedded mode at start-up: responses a previous run left generating can never finish; say so."""
    async with runtime.sessionmaker() as session, session.begin():
        return await repository.fail_unfinished(session, error=LOST_GENERATION_ERROR)
