"""When a running response stops for steering input (issue 24): once a steer is asked (a signal, or the flag its
lease reads from the row), at the first safe boundary: between two tokens, never inside a call's arguments (the
assembler says), never in a structured output (it completes first), never while an MCP call is in flight. A stop
made for it ends the response `incomplete` with reason `steered`, unless a cancel came too."""

from __future__ import annotations

from dataclasses import replace

from app.events.assembler import ResponseAssembler
from app.generation.job import GenerationJob
from app.generation.runner import GenerationRun
from app.generation.types import Finish
from app.jobs.tool_loop import LoopRun

#: Text formats whose output is one structured value: a steer never cuts it (the response completes first).
STRUCTURED_FORMATS = frozenset({"json_schema", "json_object"})


class SteeringStop:
    """One run's steering: whether a steer was signalled, and whether the run stopped for it."""

    def __init__(self, job: GenerationJob) -> None:
        #: A steer signal came (the stored request is the lease's to read: see `check`).
        self.asked = False
        #: The generation was stopped for it, at a safe boundary.
        self.stopped = False
        text_format = (job.response.get("text") or {}).get("format") or {}
        self._structured = text_format.get("type") in STRUCTURED_FORMATS

    def check(self, generation: GenerationRun, assembler: ResponseAssembler, *, stored: bool) -> None:
        """Stop `generation` now if a steer is asked (signalled, or `stored`) and this is a safe boundary."""
        if not (self.asked or stored) or self.stopped or self._structured or not assembler.steerable():
            return
        if isinstance(generation, LoopRun):
            if generation.call is not None and not generation.call.done():
                return  # an MCP call in flight is never cut: the next round's first token stops it
            generation.run.cancel()  # the model's run only: the loop then ends with this round
        else:
            generation.cancel()
        self.stopped = True

    def made(self, finish: Finish) -> bool:
        """Whether `finish` is the stop this run made for steering (it reads `cancelled` from the engine)."""
        return self.stopped and finish.reason == "cancelled"

    @staticmethod
    def steered(finish: Finish) -> Finish:
        return replace(finish, reason="steered")
