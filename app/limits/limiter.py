"""The per-tenant limits (requests and tokens per minute), their 429s, and the one interface both stores implement:
in this process (embedded mode, `memory_store.py`) or in Redis, shared by every API node and worker (distributed
mode, `redis_store.py`). Every limit is keyed by the tenant string and nothing else; what each tenant's limits are,
its `LimitsPolicy` says (policy.py)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

from app.errors import RateLimited, ServiceUnavailable, TokensRateLimited, is_outage
from app.limits.buckets import BucketStep, Limit, Step, Verdict, Window, openai_duration
from app.limits.headers import current_request
from app.limits.policy import FixedLimits, LimitsPolicy, TenantLimits

logger = logging.getLogger(__name__)

#: Per-minute names, as OpenAI's 429 messages write them.
PER_MINUTE = {Limit.REQUESTS: "requests per min (RPM)", Limit.TOKENS: "tokens per min (TPM)"}


class BucketStore(Protocol):
    """Where the buckets live. `apply` runs the steps on the tenant's buckets atomically: if a TAKE is refused,
    no bucket changes. It answers the index of the refused step (None: none) and each bucket's level after."""

    async def apply(self, tenant: str, steps: Sequence[BucketStep]) -> tuple[int | None, list[float]]: ...

    async def close(self) -> None: ...


class TenantRateLimits:
    """Requests and tokens per minute for each tenant, as its `policy` answers them (0: that limit is off). Checks
    record their verdict for the request's headers (headers.py)."""

    def __init__(
        self,
        store: BucketStore,
        *,
        requests_per_min: int = 0,
        tokens_per_min: int = 0,
        policy: LimitsPolicy | None = None,
    ) -> None:
        """Without a `policy`, every tenant has `requests_per_min` and `tokens_per_min`."""
        self.store = store
        self.policy: LimitsPolicy = policy or FixedLimits(
            TenantLimits(requests_per_min=requests_per_min, tokens_per_min=tokens_per_min)
        )

    def watch(self, tenant: str) -> None:
        """This request is `tenant`'s: its headers show that tenant's limits, even if nothing charges it."""
        state = current_request()
        if state is not None:
            state.peek = partial(self.peek, tenant)

    def release_when_sent(self, release: Callable[[], None]) -> bool:
        """Call `release` once this /v1 HTTP request's response has been sent in full (RateLimitHeaders does), as
        a dependency with `yield` would but without its cost on every request; False when there is no such
        request (a WebSocket, a dependency called outside the app): the caller releases at once itself."""
        state = current_request()
        if state is None:
            return False
        state.release = release
        return True

    async def peek(self, tenant: str) -> Verdict:
        return await self._check(tenant, Step.PEEK, Step.PEEK)

    async def admit_request(self, tenant: str) -> Verdict:
        """Count one request that does work: a 429 (type `requests`) when the tenant's minute is spent."""
        return self._admitted(await self._check(tenant, Step.TAKE, Step.PEEK, requests=1))

    async def admit_tokens(self, tenant: str, tokens: int) -> Verdict:
        """Charge the prompt tokens of a generation about to be queued: a 429 (type `tokens`) when the tenant's
        bucket does not hold them, one that says not to retry when no minute ever could."""
        limits = await self.policy.limits_of(tenant)
        if limits.tokens_per_min and tokens > limits.tokens_per_min:
            raise TokensRateLimited(
                f"Request too large on {PER_MINUTE[Limit.TOKENS]}: Limit {limits.tokens_per_min}, Requested "
                f"{tokens}. The input or output tokens must be reduced in order to run successfully.",
                code="rate_limit_exceeded",
                headers={"x-should-retry": "false"},
            )
        return self._admitted(await self._check(tenant, Step.PEEK, Step.TAKE, tokens=tokens, limits=limits))

    async def charge_tokens(self, tenant: str, tokens: int) -> None:
        """Charge tokens that were used (a generation's output, known when it ends), however many are left: a
        tenant in debt waits it out. Never refuses."""
        if tokens:
            await self._check(tenant, None, Step.CHARGE, tokens=tokens, record=False)

    async def _check(
        self,
        tenant: str,
        requests_step: Step | None,
        tokens_step: Step,
        *,
        requests: int = 0,
        tokens: int = 0,
        record: bool = True,
        limits: TenantLimits | None = None,
    ) -> Verdict:
        # The capacities travel with each step: a bucket is the tenant's, whatever its limit is today.
        limits = limits or await self.policy.limits_of(tenant)
        steps: list[BucketStep] = []
        if limits.requests_per_min and requests_step is not None:
            steps.append(BucketStep(Limit.REQUESTS, limits.requests_per_min, requests_step, requests))
        if limits.tokens_per_min:
            steps.append(BucketStep(Limit.TOKENS, limits.tokens_per_min, tokens_step, tokens))
        if not steps:
            return Verdict(())
        try:
            refused, levels = await self.store.apply(tenant, steps)
        except Exception as error:
            if not is_outage(error):
                raise
            # NOTE: closed, as a create is when Redis is down (its queue is there too): a limit nobody can check
            # is not a limit, and a tenant could spend an outage flooding the workers.
            raise ServiceUnavailable(
                "The rate limiter is unavailable; try again shortly.", code="rate_limiter_unavailable"
            ) from error
        verdict = Verdict(
            tuple(Window(step.limit, step.capacity, level) for step, level in zip(steps, levels, strict=True)),
            steps[refused] if refused is not None else None,
        )
        state = current_request()
        if record and state is not None:
            state.verdict = verdict
        return verdict

    def _admitted(self, verdict: Verdict) -> Verdict:
        refused = verdict.refused
        if refused is None:
            return verdict
        window = verdict.window(refused.limit)
        assert window is not None  # a refused step is one of the verdict's windows
        wait_s = window.wait_s(refused.cost)
        used = window.capacity - window.remaining
        error_class = RateLimited if refused.limit is Limit.REQUESTS else TokensRateLimited
        raise error_class(
            f"Rate limit reached on {PER_MINUTE[refused.limit]}: Limit {window.capacity}, Used {used}, Requested "
            f"{math.ceil(refused.cost)}. Please try again in {openai_duration(wait_s)}.",
            code="rate_limit_exceeded",
            headers={
                # The SDK reads retry-after-ms first (to the millisecond), then Retry-After (whole seconds).
                "retry-after": str(max(1, math.ceil(wait_s))),
                "retry-after-ms": str(max(1, math.ceil(wait_s * 1000))),
                **verdict.headers(),
            },
        )

    async def close(self) -> None:
        await self.store.close()
