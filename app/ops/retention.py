"""Bounded storage: stored responses are purged once RESPONSES_RETENTION_DAYS pass, and the events of finished
background streams sooner, once RESPONSES_EVENTS_RETENTION_HOURS pass. Ended batches and finished webhook
deliveries go after RESPONSES_RETENTION_DAYS too, the files batches write after RESPONSES_BATCH_OUTPUT_RETENTION_DAYS,
and a day's usage counters after RESPONSES_USAGE_RETENTION_DAYS; Idempotency-Keys once their window
(RESPONSES_IDEMPOTENCY_WINDOW_HOURS) ends; a vector store once its own expires_after passes (from its last
activity), with its files' chunks. This module is the one home of every retention rule.

A replay of a pruned response still ends: the stream relay builds its terminal event from the stored row.

NOTE: a chain is purged from its end. The hosted API keeps each response 30 days from its creation; here a
response is kept while a stored response continues it (previous_response_id), so a response that can be read can
also be continued, with its whole context: a chain expires once its newest turn does. Conversations are not
purged (the hosted API does not expire them either): they hold their own copies of their items.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from app.batches import repository as batches
from app.config import Settings
from app.db.base import utc_now
from app.db.session import Database
from app.events.terminal import TERMINAL_STATUSES
from app.files import repository as files
from app.files.schemas import OUTPUT_PURPOSE
from app.idempotency import repository as idempotency
from app.responses import repository
from app.usage import repository as usage
from app.vector_stores import repository as vector_stores
from app.webhooks import repository as webhooks

logger = logging.getLogger(__name__)

#: Responses whose events one transaction deletes (about 200 event rows each): short transactions, no long locks.
PRUNE_BATCH = 100
#: Responses one purge transaction deletes, with their items and events.
PURGE_BATCH = 200
#: Batches, files or webhook deliveries one transaction deletes (a file with its chunks of up to 1 MiB each).
ROWS_BATCH = 100
#: How old a half-written upload is when retention drops it (its process died mid-upload).
ABANDONED_UPLOAD_DAYS = 1.0
#: How often the embedded server and the workers prune.
PRUNE_INTERVAL_S = 600.0


@dataclass(frozen=True, slots=True)
class RetentionReport:
    #: Responses deleted whole (expired).
    purged_responses: int
    #: Finished responses whose stored stream events were dropped.
    pruned_event_streams: int
    #: Usage rows (a tenant's day with a model) dropped.
    pruned_usage_days: int = 0
    #: Ended batches deleted (with any lines left).
    purged_batches: int = 0
    #: Files written by batches (output and error files) deleted with their bytes.
    purged_batch_files: int = 0
    #: Delivered or given-up webhook deliveries deleted.
    purged_webhook_deliveries: int = 0
    #: Vector stores past their expires_after deleted, with their files' chunks.
    purged_vector_stores: int = 0
    #: Idempotency-Keys whose window ended, forgotten.
    purged_idempotency_keys: int = 0
    #: Uploads left half-written by a process that died, deleted with their bytes.
    purged_abandoned_uploads: int = 0


async def _in_batches(database: Database, batch: Callable[[AsyncSession], Awaitable[int]]) -> int:
    """Run `batch` in a transaction of its own until one deletes nothing: a failure rolls back only its own
    batch, and no lock is held longer than one batch."""
    total = 0
    while True:
        async with database.transaction() as session:
            deleted = await batch(session)
        total += deleted
        if deleted == 0:
            return total


async def prune_finished_events(database: Database, retention_hours: float) -> int:
    """Delete the events of responses that ended more than `retention_hours` ago, in batches; how many responses.
    0 hours keeps everything."""
    if retention_hours <= 0:
        return 0
    ended_before = utc_now() - timedelta(hours=retention_hours)
    total = await _in_batches(
        database,
        lambda session: repository.prune_events(
            session, ended_before=ended_before, statuses=TERMINAL_STATUSES, limit=PRUNE_BATCH
        ),
    )
    if total:
        logger.info("pruned the stored events of %d finished responses", total)
    return total


async def purge_expired_responses(database: Database, retention_days: float, *, batch: int = PURGE_BATCH) -> int:
    """Delete whole responses created more than `retention_days` ago, in batches of `batch`; how many. Never one
    still queued or generating, nor one that a kept response continues. 0 days keeps everything."""
    if retention_days <= 0:
        return 0
    created_before = utc_now() - timedelta(days=retention_days)
    total = await _in_batches(
        database,
        lambda session: repository.purge_expired(
            session, created_before=created_before, statuses=TERMINAL_STATUSES, limit=batch
        ),
    )
    if total:
        logger.info("purged %d responses past their retention", total)
    return total


async def prune_usage(database: Database, retention_days: int, *, today: date | None = None) -> int:
    """Delete the usage rows of days more than `retention_days` before `today` (UTC); how many. 0 keeps them all.
    One statement: a day's rows are few (a tenant a model), and retention runs every few minutes."""
    if retention_days <= 0:
        return 0
    before = (today or utc_now().date()) - timedelta(days=retention_days)
    async with database.transaction() as session:
        pruned = await usage.prune(session, before=before)
    if pruned:
        logger.info("pruned %d usage rows of days before %s", pruned, before.isoformat())
    return pruned


def _cutoff(days: float) -> datetime:
    return utc_now() - timedelta(days=days)


async def _purge_created_before(
    database: Database,
    retention_days: float,
    what: str,
    purge: Callable[[AsyncSession, datetime], Awaitable[int]],
) -> int:
    """Run `purge(session, created_before)` in batches for rows older than `retention_days`; how many it deleted.
    0 days keeps everything."""
    if retention_days <= 0:
        return 0
    created_before = _cutoff(retention_days)
    total = await _in_batches(database, lambda session: purge(session, created_before))
    if total:
        logger.info("purged %d %s past their retention", total, what)
    return total


async def purge_ended_batches(database: Database, retention_days: float, *, batch: int = ROWS_BATCH) -> int:
    """Delete batches that ended and were created more than `retention_days` ago, in batches; how many. Never one
    still moving (validating, in_progress, finalizing, cancelling). 0 days keeps everything."""
    return await _purge_created_before(
        database,
        retention_days,
        "ended batches",
        lambda session, before: batches.purge_ended(session, created_before=before, limit=batch),
    )


async def purge_batch_files(database: Database, retention_days: float, *, batch: int = ROWS_BATCH) -> int:
    """Delete the output and error files batches wrote more than `retention_days` ago, with their bytes, in
    batches; how many. Uploaded files are kept until deleted. 0 days keeps everything."""
    return await _purge_created_before(
        database,
        retention_days,
        "batch output files",
        lambda session, before: files.purge_files(session, purpose=OUTPUT_PURPOSE, created_before=before, limit=batch),
    )


async def purge_abandoned_uploads(database: Database, *, batch: int = ROWS_BATCH) -> int:
    """Delete the uploads a process left half-written when it died (no read ever finds them) once they are a day
    old: an upload that old is not still being written. How many."""
    return await _purge_created_before(
        database,
        ABANDONED_UPLOAD_DAYS,
        "abandoned uploads",
        lambda session, before: files.purge_files(session, status=files.UPLOADING, created_before=before, limit=batch),
    )


async def purge_finished_deliveries(database: Database, retention_days: float, *, batch: int = ROWS_BATCH) -> int:
    """Delete delivered and given-up webhook deliveries created more than `retention_days` ago, in batches; how
    many. A pending one stays however old (its retry window gives it up first). 0 days keeps everything."""
    return await _purge_created_before(
        database,
        retention_days,
        "finished webhook deliveries",
        lambda session, before: webhooks.delete_finished(session, created_before=before, limit=batch),
    )


async def purge_expired_vector_stores(database: Database, *, batch: int = ROWS_BATCH) -> int:
    """Delete the vector stores whose expires_after has passed (counted from their last activity), with their
    files, batches and chunks, in batches; how many. A store without expires_after is kept until deleted.

    NOTE: the hosted API keeps an expired store, `expired`, for a while; here it reads `expired` from the moment
    it expires until the next retention round (every few minutes) deletes it."""
    total = await _in_batches(
        database, lambda session: vector_stores.purge_expired_stores(session, now=utc_now(), limit=batch)
    )
    if total:
        logger.info("purged %d vector stores past their expiry", total)
    return total


async def purge_expired_idempotency_keys(database: Database, *, batch: int = PURGE_BATCH) -> int:
    """Forget the Idempotency-Keys whose window ended (a request with one is a new create already: this only
    bounds the table), in batches; how many. Each key carries its own end, so there is no setting to read here."""
    now = utc_now()
    total = await _in_batches(database, lambda session: idempotency.purge_expired(session, now=now, limit=batch))
    if total:
        logger.info("forgot %d Idempotency-Keys past their window", total)
    return total


async def apply_retention(database: Database, settings: Settings) -> RetentionReport:
    """Every retention rule, as the periodic task, the workers' cron job and `llama-responses prune` run them."""
    purged = await purge_expired_responses(database, settings.retention_days)
    pruned = await prune_finished_events(database, settings.events_retention_hours)
    return RetentionReport(
        purged_responses=purged,
        pruned_event_streams=pruned,
        pruned_usage_days=await prune_usage(database, settings.usage_retention_days),
        purged_batches=await purge_ended_batches(database, settings.retention_days),
        purged_batch_files=await purge_batch_files(database, settings.batch_output_retention_days),
        purged_webhook_deliveries=await purge_finished_deliveries(database, settings.retention_days),
        purged_vector_stores=await purge_expired_vector_stores(database),
        purged_idempotency_keys=await purge_expired_idempotency_keys(database),
        purged_abandoned_uploads=await purge_abandoned_uploads(database),
    )
