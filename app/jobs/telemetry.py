"""What one generation job reports as it runs: queue wait, time to first token, decode speed, its final status and
prefix reuse (metrics), its prefill and decode (spans), and its ids (log context). Hooks called by the job
execution."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from app.generation.job import GenerationJob
from app.generation.types import Finish
from app.observability import logs, tracing
from app.observability.metrics import (
    OUTPUT_TOKENS,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_REUSED_TOKENS,
    PROMPT_TOKENS,
    QUEUE_WAIT,
    RESPONSES,
    TENANT_INPUT_TOKENS,
    TENANT_OUTPUT_TOKENS,
    TENANT_REQUESTS,
    TIME_TO_FIRST_TOKEN,
    TOKENS_PER_SECOND,
    tenant_label,
)

logger = logging.getLogger("llama_responses.generation")


class JobObserver:
    """Times one run of a job; `resumed` (a takeover) runs report no wait or first token: their clock started
    in another run."""

    def __init__(self, job: GenerationJob) -> None:
        self.job = job
        self.model = job.model
        queued_at = job.telemetry.get("queued_at")
        self.queued_at: float | None = float(queued_at) if isinstance(queued_at, int | float) else None
        self.resumed = False
        self.started_ns = 0
        self.first_ns: int | None = None

    @contextmanager
    def running(self) -> Iterator[None]:
        """The job's span and log context, around its whole run."""
        job = self.job
        request_id = job.telemetry.get("request_id")
        attributes = {"llama_responses.response_id": job.response_id, "llama_responses.model": self.model}
        with (
            logs.bound(
                response_id=job.response_id,
                tenant=job.tenant,
                model=self.model,
                request_id=request_id if isinstance(request_id, str) else None,
            ),
            tracing.job_span("generate", job.telemetry.get("trace") or {}, attributes),
        ):
            yield

    def generation_started(self, *, resumed: bool) -> None:
        self.resumed = resumed
        self.started_ns = time.time_ns()
        if not resumed and self.queued_at is not None:
            QUEUE_WAIT.labels(self.model).observe(max(time.time() - self.queued_at, 0.0))

    def output(self) -> None:
        """A piece of text (or a token) came out of the model."""
        if self.first_ns is not None:
            return
        self.first_ns = time.time_ns()
        if not self.resumed and self.queued_at is not None:
            TIME_TO_FIRST_TOKEN.labels(self.model).observe(max(self.first_ns / 1e9 - self.queued_at, 0.0))

    def generation_s(self) -> float:
        """Seconds since this run's generation started (its prefill); 0 before it started."""
        return max((time.time_ns() - self.started_ns) / 1e9, 0.0) if self.started_ns else 0.0

    def finished(self, status: str, finish: Finish | None) -> None:
        """The run ended with this final status (`finish` None: the model failed)."""
        end_ns = time.time_ns()
        RESPONSES.labels(self.model, status).inc()
        tenant = tenant_label(self.job.tenant)
        TENANT_REQUESTS.labels(tenant).inc()
        first_ns = self.first_ns if self.first_ns is not None else end_ns
        output_tokens = finish.output_tokens if finish is not None else 0
        logger.info(
            "generation %s: %d output tokens in %.2f s", status, output_tokens, (end_ns - self.started_ns) / 1e9
        )
        if self.started_ns:
            read: dict[str, int] = {}
            if finish is not None:
                read = {
                    "llama_responses.prompt_tokens": finish.prompt_tokens,
                    "llama_responses.cached_tokens": finish.cached_tokens,
                }
            tracing.record_span("prefill", self.started_ns, first_ns, read)
            written = {"llama_responses.status": status, "llama_responses.output_tokens": output_tokens}
            tracing.record_span("decode", first_ns, end_ns, written)
        if finish is None:
            return
        PROMPT_TOKENS.labels(self.model).inc(finish.prompt_tokens)
        OUTPUT_TOKENS.labels(self.model).inc(finish.output_tokens)
        TENANT_INPUT_TOKENS.labels(tenant).inc(finish.prompt_tokens)
        TENANT_OUTPUT_TOKENS.labels(tenant).inc(finish.output_tokens)
        if finish.cached_tokens:
            PREFIX_CACHE_HITS.labels(self.model).inc()
            PREFIX_CACHE_REUSED_TOKENS.labels(self.model).inc(finish.cached_tokens)
        decode_s = (end_ns - first_ns) / 1e9
        # One token has no speed to speak of; the decode of two or more does.
        if finish.output_tokens > 1 and decode_s > 0:
            TOKENS_PER_SECOND.labels(self.model).observe((finish.output_tokens - 1) / decode_s)
