"""What a transport is, whatever carries the jobs: jobs in (to whoever runs the model), events out (live fan-out
to the API nodes), cancel and steer signals. Protocols only: the in-process and arq/Redis backends sit beside this
module, and the code that runs a job is handed to them (JobExecutor), so no transport imports the jobs it carries."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.generation.job import GenerationJob, JobClass


@dataclass(frozen=True, slots=True)
class ModelAvailability:
    #: Processes that can run the model's jobs now (embedded mode: this one).
    live_workers: int
    #: Embedded mode: whether its weights are in memory now (None in distributed mode: each worker's own).
    loaded: bool | None = None
    #: Jobs waiting for one of those workers (embedded mode: in its waiting room).
    waiting_jobs: int | None = None


class JobExecutor(Protocol):
    """Runs jobs where the model is (app/jobs builds it; the embedded backend and the worker are handed one)."""

    async def execute(self, job: GenerationJob) -> None:
        """Run the job to its end: its events published, its final state stored."""

    def cancel(self, response_id: str) -> None:
        """Stop the job's generation, if it runs here (a cancel signal)."""

    def steer(self, response_id: str) -> None:
        """Stop the job's generation at its next safe boundary, for steering input, if it runs here."""

    def preempt(self, response_id: str) -> bool:
        """Ask the job, if it runs here, to give its place back at its next safe boundary (between two tokens,
        never inside a tool call): its progress stored, it reads `queued` again, and a later run goes on from
        there. Whether it will (only a stored background job without tools, generating now, can)."""

    def loaded(self) -> set[str] | None:
        """The models in memory here now; None where models are not loaded on demand."""

    async def close(self) -> None: ...


class Subscription(Protocol):
    async def next(self, timeout_s: float) -> dict[str, Any] | None:
        """The next event, or None when none came within `timeout_s`."""

    async def close(self) -> None: ...


class EventBus(Protocol):
    """Live fan-out of one response's events (never the source of truth: the database is)."""

    async def publish(self, response_id: str, event: dict[str, Any]) -> None: ...

    async def subscribe(self, response_id: str) -> Subscription: ...


class GenerationQueue(Protocol):
    @property
    def bus(self) -> EventBus: ...

    async def enqueue(self, job: GenerationJob) -> None: ...

    async def cancel(self, response_id: str) -> None:
        """Signal whoever runs this response's generation to stop it."""

    async def steer(self, response_id: str) -> None:
        """Signal whoever runs this response's generation that steering input waits for it."""

    async def requeue(self, job: GenerationJob, previous_owner: str | None) -> None:
        """Enqueue a job again (its worker died, or Redis lost it), clearing what the queue kept of its last run."""

    async def job_is_waiting(self, response_id: str) -> bool:
        """The job is queued or running here (False when the queue lost it)."""

    async def release_stranded(self) -> int:
        """Move the jobs that wait where no worker will take them (the own queue of a worker that is gone or
        draining) to where one will; how many moved."""

    async def live_workers(self, model: str | None = None) -> int:
        """How many workers can run `model`'s jobs now (None: any model's)."""

    async def availability(self, models: Sequence[str]) -> dict[str, ModelAvailability]:
        """Per model: what can run its jobs now and what waits for them (/v1/models, the health routes, metrics)."""

    async def queued_by_tenant(self, models: Sequence[str]) -> dict[tuple[str, JobClass], int]:
        """The models' jobs waiting for a worker (not those running), by tenant and class, summed over the models
        (metrics: queue depth by tenant). Embedded mode: its waiting rooms; distributed: the models' queues."""

    async def ping(self) -> None:
        """Raise if the queue's backing store (Redis) cannot be reached."""

    async def job_alive(self, response_id: str) -> bool:
        """Whether the job is still queued or held by a live worker: False once nothing can produce its events
        (its worker died, or it was lost with Redis). How a `store: false` stream learns that it will not end."""

    async def close(self) -> None: ...
