"""Delivering the outbox: every API node and worker runs rounds (app/main.py, worker/main.py) that claim due
deliveries (one process an attempt: app/webhooks/repository.claim), POST each signed, through app/outbound, and
store the outcome: a 2xx is delivered; anything else is retried with exponential backoff and jitter, under the
same webhook-id, until the retry window has passed since the event; an endpoint that has failed without a success
for that whole window is disabled. Finished deliveries are dropped by retention (app/ops/retention.py).

Each attempt runs on its own (a task the deliverer holds), in a slot of its endpoint and of its tenant: a round
claims only what free slots can take, taking tenants in turns, and never waits for an attempt. A receiver that
never answers holds its own slots for the attempt's timeout, and its tenant's; every other tenant's deliveries go
out on the next round (RESPONSES_WEBHOOK_DELIVERY_INTERVAL_S) as if it were not there. The slots are per process:
N processes send at most N times as much to one endpoint at once."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from app.config import Settings
from app.db.base import utc_now
from app.db.models import WebhookDeliveryRow, WebhookEndpointRow
from app.db.session import Database
from app.ids import new_id
from app.observability.metrics import WEBHOOK_DELIVERED, WEBHOOK_FAILED, WEBHOOK_LAG, WEBHOOK_RETRIES
from app.outbound.addresses import AllowedHosts, OutboundRefused
from app.outbound.client import TIMEOUT_S, OutboundAnswer, OutboundFailed, post
from app.secrets.sealer import ContentSealer
from app.webhooks import repository
from app.webhooks.signing import signed_headers

logger = logging.getLogger(__name__)

#: The purpose a signing secret is sealed for (with its tenant).
SECRET_PURPOSE = "webhook_secret"
#: A claim lasts this many attempt timeouts (an attempt also resolves the name and connects first).
CLAIM_TIMEOUTS = 6


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    retry_window_s: float
    #: The wait after the first failed attempt; it doubles with each one, up to max_retry_s, then jittered.
    first_retry_s: float = 5.0
    max_retry_s: float = 3600.0
    #: How long a claim holds a delivery: longer than an attempt may take, so that only a claimer that died
    #: leaves it due again (it is then sent again: at least once).
    claim_s: float = TIMEOUT_S * CLAIM_TIMEOUTS
    timeout_s: float = TIMEOUT_S
    #: Attempts this process has in flight at once: in all, of one tenant, to one endpoint.
    max_in_flight: int = 128
    max_in_flight_per_tenant: int = 16
    max_in_flight_per_endpoint: int = 4

    @classmethod
    def from_settings(cls, settings: Settings) -> DeliveryPolicy:
        timeout_s = settings.webhook_timeout_s
        return cls(
            retry_window_s=settings.webhook_retry_window_s,
            timeout_s=timeout_s,
            claim_s=timeout_s * CLAIM_TIMEOUTS,
            max_in_flight=settings.webhook_max_in_flight,
            max_in_flight_per_tenant=settings.webhook_max_in_flight_per_tenant,
            max_in_flight_per_endpoint=settings.webhook_max_in_flight_per_endpoint,
        )

    def retry_delay_s(self, attempts: int) -> float:
        """After `attempts` failed attempts: exponential, capped, with jitter (half to all of it) so that the
        retries of many deliveries to one receiver that was down do not arrive together."""
        backoff = min(self.first_retry_s * 2.0 ** max(attempts - 1, 0), self.max_retry_s)
        return backoff * random.uniform(0.5, 1.0)


def signing_secrets(sealer: ContentSealer, endpoint: WebhookEndpointRow, now: datetime) -> list[str]:
    """The endpoint's secret, and the one before it while a rotation's grace period lasts."""
    secrets = [sealer.open(endpoint.sealed_secret, purpose=SECRET_PURPOSE, tenant=endpoint.tenant)["secret"]]
    if endpoint.previous_sealed_secret and endpoint.previous_secret_until and endpoint.previous_secret_until > now:
        previous = sealer.open(endpoint.previous_sealed_secret, purpose=SECRET_PURPOSE, tenant=endpoint.tenant)
        secrets.append(previous["secret"])
    return secrets


async def send(
    sealer: ContentSealer,
    endpoint: WebhookEndpointRow,
    webhook_id: str,
    body: str,
    *,
    allowed: AllowedHosts,
    timeout_s: float = TIMEOUT_S,
) -> OutboundAnswer:
    """One signed POST of `body` to the endpoint (signed now: the timestamp is this attempt's)."""
    now = utc_now()
    headers = signed_headers(signing_secrets(sealer, endpoint, now), webhook_id, int(now.timestamp()), body)
    headers["user-agent"] = "llama-responses-webhooks"
    return await post(endpoint.url, body.encode(), headers, allowed=allowed, timeout_s=timeout_s)


class WebhookDeliverer:
    """Runs delivery rounds for one process, and owns the attempts they start (`close` ends those in flight)."""

    def __init__(
        self, database: Database, sealer: ContentSealer, settings: Settings, policy: DeliveryPolicy | None = None
    ) -> None:
        self.database = database
        self.sealer = sealer
        self.allowed = AllowedHosts.parse(settings.outbound_allowed_hosts)
        self.policy = policy or DeliveryPolicy.from_settings(settings)
        self._attempts: set[asyncio.Task[None]] = set()
        self._tenants: Counter[str] = Counter()
        self._endpoints: Counter[str] = Counter()

    @property
    def in_flight(self) -> int:
        """Attempts started and not finished."""
        return len(self._attempts)

    async def start_round(self) -> int:
        """Claim the due deliveries free slots can take (tenants in turns) and start an attempt for each, without
        waiting for any; how many were started."""
        return len(await self._start_round())

    async def run_round(self) -> int:
        """A round, waited for: its attempts started and finished (tests, and whoever wants a round's outcome)."""
        started = await self._start_round()
        await asyncio.gather(*started)
        return len(started)

    async def close(self) -> None:
        """Stop the attempts in flight (their claims lapse: another process, or the next start, sends them again)."""
        attempts = list(self._attempts)
        for attempt in attempts:
            attempt.cancel()
        await asyncio.gather(*attempts, return_exceptions=True)

    def _bounds(self) -> repository.ClaimBounds | None:
        policy = self.policy
        free = policy.max_in_flight - len(self._attempts)
        if free <= 0:
            return None
        return repository.ClaimBounds(
            limit=free,
            per_tenant=policy.max_in_flight_per_tenant,
            per_endpoint=policy.max_in_flight_per_endpoint,
            busy_endpoints=frozenset(
                key for key, held in self._endpoints.items() if held >= policy.max_in_flight_per_endpoint
            ),
            busy_tenants=frozenset(
                key for key, held in self._tenants.items() if held >= policy.max_in_flight_per_tenant
            ),
        )

    def _fitting(self, due: list[tuple[str, str, str]]) -> list[str]:
        """The ids of `due` that this process's free slots take (what it holds already counted)."""
        tenants, endpoints = Counter(self._tenants), Counter(self._endpoints)
        ids: list[str] = []
        for delivery_id, tenant, endpoint_id in due:
            if tenants[tenant] < self.policy.max_in_flight_per_tenant and (
                endpoints[endpoint_id] < self.policy.max_in_flight_per_endpoint
            ):
                tenants[tenant] += 1
                endpoints[endpoint_id] += 1
                ids.append(delivery_id)
        return ids

    async def _start_round(self) -> list[asyncio.Task[None]]:
        bounds = self._bounds()
        if bounds is None:
            return []
        token = new_id("claim")
        async with self.database.transaction() as session:
            due = await repository.due_fairly(session, bounds=bounds)
            claimed = await repository.claim(session, self._fitting(due), token=token, claim_s=self.policy.claim_s)
            endpoints = await repository.endpoints_by_id(session, list({row.endpoint_id for row in claimed}))
        return [self._start(row, endpoints.get(row.endpoint_id), token) for row in claimed]

    def _start(self, row: WebhookDeliveryRow, endpoint: WebhookEndpointRow | None, token: str) -> asyncio.Task[None]:
        """The attempt as a task in the delivery's tenant's and endpoint's slots, given back when it ends."""
        self._tenants[row.tenant] += 1
        self._endpoints[row.endpoint_id] += 1
        attempt = asyncio.create_task(self._attempt(row, endpoint, token), name=f"webhook delivery {row.id}")
        self._attempts.add(attempt)

        def finished(task: asyncio.Task[None]) -> None:
            self._attempts.discard(task)
            for counter, key in ((self._tenants, row.tenant), (self._endpoints, row.endpoint_id)):
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]
            if not task.cancelled() and task.exception() is not None:
                # _attempt stores every failure as the attempt's outcome; this is one it could not even store (the
                # database gone): the claim lapses and the delivery is attempted again.
                logger.error("webhook delivery %s could not store its outcome: %r", row.id, task.exception())

        attempt.add_done_callback(finished)
        return attempt

    async def _attempt(self, row: WebhookDeliveryRow, endpoint: WebhookEndpointRow | None, token: str) -> None:
        answer: OutboundAnswer | None = None
        error: str | None = None
        if endpoint is None or endpoint.status != "enabled":
            await self._store(row, token, {"status": "failed", "last_error": "The endpoint is disabled or deleted."})
            WEBHOOK_FAILED.inc()
            return
        try:
            answer = await send(
                self.sealer, endpoint, row.id, row.body, allowed=self.allowed, timeout_s=self.policy.timeout_s
            )
        except (OutboundRefused, OutboundFailed) as failure:
            error = str(failure)
        except Exception as failure:  # a bug must not stop the round: the attempt is retried
            logger.exception("webhook delivery %s failed", row.id)
            error = f"internal error: {type(failure).__name__}"
        now = utc_now()
        # The status only: what the receiver said is not kept (nor shown back in the deliveries list).
        values: dict[str, Any] = {"last_status_code": answer.status_code if answer else None, "last_error": error}
        delivered = answer is not None and 200 <= answer.status_code < 300
        if delivered:
            values.update(status="delivered", delivered_at=now)
        elif answer is not None:
            values["last_error"] = f"The endpoint answered HTTP {answer.status_code} ({answer.reason})."
        if not delivered:
            if (now - row.created_at).total_seconds() >= self.policy.retry_window_s:
                values["status"] = "failed"
            else:
                values["next_attempt_at"] = now + timedelta(seconds=self.policy.retry_delay_s(row.attempts))
        if not await self._store(row, token, values, endpoint=endpoint, succeeded=delivered):
            return
        if delivered:
            WEBHOOK_DELIVERED.inc()
            WEBHOOK_LAG.observe(max(time.time() - row.created_at.timestamp(), 0.0))
        elif values.get("status") == "failed":
            WEBHOOK_FAILED.inc()
        else:
            WEBHOOK_RETRIES.inc()

    async def _store(
        self,
        row: WebhookDeliveryRow,
        token: str,
        values: dict[str, Any],
        *,
        endpoint: WebhookEndpointRow | None = None,
        succeeded: bool = False,
    ) -> bool:
        """The attempt's outcome, if this round still holds the delivery; the endpoint's failing streak with it."""
        now = utc_now()
        async with self.database.transaction() as session:
            if not await repository.finish_attempt(session, row.id, token=token, values=values):
                return False
            if endpoint is not None:
                disabled = await repository.record_endpoint_outcome(
                    session,
                    endpoint.id,
                    succeeded=succeeded,
                    now=now,
                    disable_failing_since=now - timedelta(seconds=self.policy.retry_window_s),
                )
                if disabled:
                    logger.warning(
                        "webhook endpoint %s disabled: its deliveries failed for %.0f s",
                        endpoint.id,
                        self.policy.retry_window_s,
                    )
        return True
