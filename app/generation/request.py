"""GenerationRequest: what the engine is handed for one generation, and its only way back out (`emit`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from app.generation.job import JobClass
from app.generation.types import GenerationOutput, SamplingParams


@dataclass(eq=False)
class GenerationRequest:
    prompt: list[int]
    sampling: SamplingParams
    #: Called on the engine thread with each text piece, then one Finish or GenerationFailed.
    emit: Callable[[GenerationOutput], object]
    #: Whose prompt this is (the tenant): KV state is reused only between requests of one scope.
    cache_scope: str
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: Its job's priority class: waiting requests start by class, then by scope (tenant) in turn.
    job_class: JobClass = "interactive"
    #: The model family whose syntax it writes (app/generation/dialects): which tokens end it, which are markup.
    dialect: str = "hermes"
    #: Set by the engine as it starts: the dialect's tokens that end the turn, and those written as text.
    end_tokens: frozenset[int] = frozenset()
    markup_tokens: frozenset[int] = frozenset()
