"""What a job carries from the request that made it, for observability: its trace context, its request id, and
when it was queued (wall clock: the worker that reads it is another process)."""

from __future__ import annotations

import time
from typing import Any

from app.observability import logs, tracing


def job_telemetry() -> dict[str, Any]:
    """Taken where the job is made (the request); read back by the job's telemetry where it runs."""
    return {
        "trace": tracing.context_carrier(),
        "request_id": logs.current().get("request_id"),
        "queued_at": time.time(),
    }
