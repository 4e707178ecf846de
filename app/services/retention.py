"""Bounded storage: the events of finished background streams are pruned once RESPONSES_EVENTS_RETENTION_HOURS pass.

A replay of a pruned response still ends: the stream relay builds its terminal event from the stored row.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.base import utc_now
from app.db.repositories import responses as repository
from app.schemas.responses import TERMINAL_STATUSES

logger = logging.getLogger(__name__)

#: Responses whose events one transaction deletes (about 200 event rows each): short transactions, no long locks.
PRUNE_BATCH = 100
#: How often the embedded server and the workers prune.
PRUNE_INTERVAL_S = 600.0


async def prune_finished_events(sessionmaker: async_sessionmaker[AsyncSession], retention_hours: float) -> int:
    """Delete the events of responses that ended more than `retention_hours` ago, in batches; how many responses.
    0 hours keeps everything."""
    if retention_hours <= 0:
        return 0
    ended_before = utc_now() - timedelta(hours=retention_hours)
    total = 0
    while True:
        async with sessionmaker() as session, session.begin():
            pruned = await repository.prune_events(
                session, ended_before=ended_before, statuses=TERMINAL_STATUSES, limit=PRUNE_BATCH
            )
        total += pruned
        if pruned < PRUNE_BATCH:
            break
    if total:
        logger.info("pruned the stored events of %d finished responses", total)
    return total
