"""Each served model's prompt renderer (its own vocabulary and chat template), built on first use and kept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from app.generation.registry import ModelSpec
from app.generation.types import ModelLoadError, PromptRenderer


class RendererCache:
    """Builds a model's renderer once, in a thread (a vocabulary-only load reads the GGUF's vocabulary), however
    many requests ask for it at once; a build that fails is tried again by the next request."""

    def __init__(self, build: Callable[[ModelSpec], PromptRenderer]) -> None:
        self._build = build
        self._renderers: dict[str, PromptRenderer] = {}
        self._building: dict[str, asyncio.Task[PromptRenderer]] = {}

    async def get(self, spec: ModelSpec) -> PromptRenderer:
        renderer = self._renderers.get(spec.id)
        if renderer is not None:
            return renderer
        task = self._building.get(spec.id)
        if task is None:
            task = asyncio.create_task(asyncio.to_thread(self._build, spec))
            self._building[spec.id] = task
            task.add_done_callback(lambda _: self._building.pop(spec.id, None))
        try:
            # Shielded: a request that goes away does not cancel the build the others wait for.
            renderer = await asyncio.shield(task)
        except Exception as error:
            raise ModelLoadError(spec.id, error) from error
        self._renderers[spec.id] = renderer
        return renderer
