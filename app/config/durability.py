"""Settings of how long work and records last: leases, attempts, idempotency windows, retention."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class DurabilitySettings(BaseSettings):
    lease_s: float = Field(
        15.0,
        ge=1,
        description="How long a worker's claim on a job lasts unrenewed (its heartbeat renews it every third of "
        "this); an expired one is taken over, so a crashed generation resumes within about this plus "
        "reconcile_interval_s.",
    )
    reconcile_interval_s: float = Field(
        5.0, gt=0, description="How often reconciliation looks for expired leases and queued jobs Redis lost."
    )
    worker_drain_s: float = Field(
        25.0,
        ge=0,
        description="How long a worker told to stop (SIGTERM, a deploy) keeps running the foreground responses it "
        "has, taking no new job, before it cuts them; its background ones are handed over at once. Give the "
        "process manager's grace period (Kubernetes' terminationGracePeriodSeconds) a few seconds more.",
    )
    max_attempts: int = Field(
        3,
        ge=1,
        description="Runs a background job gets (the first, then takeovers after its worker died) before it is failed.",
    )
    idempotency_window_hours: float = Field(
        24.0,
        gt=0,
        le=876000,
        description="How long an Idempotency-Key is remembered, from the first request that sent it: the same key "
        "with the same body answers what that request answered until then, and is a new create after (purged "
        "with retention); at most 876000 (100 years).",
    )
    idempotency_wait_s: float = Field(
        10.0,
        ge=0,
        le=600,
        description="How long a create waits for an earlier request with the same Idempotency-Key that is still "
        "running (a response's: until it is stored) before it answers 409 `idempotency_key_in_use`.",
    )
    idempotency_abandoned_s: float = Field(
        300.0,
        gt=0,
        description="How long a request may hold its Idempotency-Key without finishing before its process is taken "
        "for dead and a retry with the key runs the create again.",
    )
    retention_days: float = Field(
        30.0,
        ge=0,
        # A longer span overflows the cutoff's datetime (now minus it): every purge would fail.
        le=36500,
        description="How long a stored response is kept (from its creation, like the hosted API's 30 days), with "
        "its input items and events; a response that a kept response continues stays too. 0 keeps them forever; "
        "at most 36500 (100 years).",
    )
    events_retention_hours: float = Field(
        24.0,
        ge=0,
        le=876000,
        description="How long a finished background stream's events are kept for replay (GET ?stream=true); "
        "after that a replay sends only the terminal event, built from the stored response. 0 keeps them forever; "
        "at most 876000 (100 years).",
    )
    usage_retention_days: int = Field(
        400,
        ge=0,
        le=36500,
        description="How long the usage table keeps a day's counters (GET /v1/usage), in days from that day; "
        "0 keeps them forever; at most 36500 (100 years).",
    )
    batch_output_retention_days: float = Field(
        30.0,
        ge=0,
        le=36500,
        description="How long the output and error files a batch writes are kept (from their creation, as the "
        "hosted API keeps them 30 days); uploaded files stay until deleted. Ended batches themselves are kept "
        "RESPONSES_RETENTION_DAYS. 0 keeps them forever; at most 36500 (100 years).",
    )
