"""Where the model runs, as the job execution sees it: a runner starts generations and cancels them; a started
generation yields text pieces, then one Finish (or GenerationFailed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from app.generation.job import GenerationJob
from app.generation.types import GenerationOutput, PromptRenderer


class GenerationRun(Protocol):
    """A started generation: iterate it for text pieces then one Finish (or GenerationFailed)."""

    def outputs(self) -> AsyncIterator[GenerationOutput]: ...

    def cancel(self) -> None:
        """Ask the generation to stop; it does within about one token, then yields its Finish."""


class ModelRunner(Protocol):
    """Where the model runs: starts generations, one or a few at a time, and cancels them by response id."""

    def start(self, job: GenerationJob) -> GenerationRun: ...

    async def tokenize(self, model: str, text: str) -> list[int]:
        """Text `model` wrote, as its tokens: a takeover appends them to the prompt to continue."""

    async def renderer(self, model: str) -> PromptRenderer:
        """`model`'s prompt renderer, where the model runs: a tool round's prompt is the conversation with the
        round's calls and results rendered again by the model's template (app/jobs/tool_loop.py)."""

    def cancel(self, response_id: str) -> None: ...

    def loaded(self) -> set[str] | None:
        """The models in memory now; None where the runner does not load models on demand (it has its one)."""

    async def close(self) -> None: ...
