"""What a transport is handed to run jobs where the model is (app/transport/base.py's JobExecutor): each job in a
JobExecution (execution.py) on one runner, with the executions running now, so that a cancel reaches them."""

from __future__ import annotations

from app.db.session import Database
from app.generation.job import GenerationJob
from app.generation.runner import ModelRunner
from app.hosted_tools.calls import HostedCaller
from app.jobs.execution import JobExecution, TokenCharge
from app.jobs.lease import DEFAULT_LEASE_S
from app.lifecycle.effects import require_registered
from app.mcp.calls import McpCaller
from app.transport.base import EventBus


class JobExecutor:
    """Runs jobs on `runner`, storing through `database` and publishing on `bus`, under leases owned by `owner`
    (this process): what a transport is handed (app/transport/base.py's JobExecutor)."""

    def __init__(
        self,
        runner: ModelRunner,
        database: Database,
        bus: EventBus,
        *,
        owner: str,
        lease_s: float = DEFAULT_LEASE_S,
        charge_tokens: TokenCharge | None = None,
        mcp: McpCaller | None = None,
        hosted: HostedCaller | None = None,
    ) -> None:
        # A job's end runs the effects its process registered at start-up: none may be missing (fail here, not
        # at the first end).
        require_registered()
        self.runner = runner
        #: Calls the MCP servers of the jobs that name some (None: their calls fail).
        self.mcp = mcp
        #: Runs the hosted tools' calls (file_search, web_search) of the jobs that offer them (None: they fail).
        self.hosted = hosted
        #: The executions running now, by response id (a cancel reaches a tool call in flight through them).
        self.executions: dict[str, JobExecution] = {}
        #: Charges a tenant's rate limit for the output tokens of each generation that ends here.
        self.charge_tokens = charge_tokens
        self.database = database
        self.bus = bus
        self.owner = owner
        self.lease_s = lease_s
        #: The jobs running now: response id -> whether it is a background job (another run can take it over).
        self.running: dict[str, bool] = {}

    async def execute(self, job: GenerationJob) -> None:
        execution = JobExecution(
            job,
            self.database,
            self.bus,
            owner=self.owner,
            lease_s=self.lease_s,
            charge_tokens=self.charge_tokens,
            mcp=self.mcp,
            hosted=self.hosted,
        )
        self.running[job.response_id] = execution.background and execution.lease is not None
        self.executions[job.response_id] = execution
        try:
            with execution.observer.running():
                await execution.run(self.runner)
        finally:
            self.running.pop(job.response_id, None)
            self.executions.pop(job.response_id, None)

    def handed_over_when_stopped(self) -> set[str]:
        """The running jobs that a stop hands over to another run (background, stored) rather than cuts."""
        return {response_id for response_id, background in self.running.items() if background}

    def cancel(self, response_id: str) -> None:
        self.runner.cancel(response_id)
        execution = self.executions.get(response_id)
        if execution is not None:
            execution.cancel()

    def steer(self, response_id: str) -> None:
        """A steer signal: the running response stops at its next safe boundary (see JobExecution.steer)."""
        execution = self.executions.get(response_id)
        if execution is not None:
            execution.steer()

    def preempt(self, response_id: str) -> bool:
        execution = self.executions.get(response_id)
        return execution is not None and execution.preempt()

    def loaded(self) -> set[str] | None:
        return self.runner.loaded()

    async def close(self) -> None:
        await self.runner.close()
