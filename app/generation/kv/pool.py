"""The KV pool (RESPONSES_KV_POOL_TOKENS): one unified set of cells that every sequence draws from as it grows,
instead of a window of the model's whole context reserved for each (what 4 sequences of SmolLM2 took, 4 x 8,192
cells, now holds 16 conversations of a few thousand tokens).

Room is taken, not promised: a sequence may grow to the model's context while the pool has cells left. When a
decode step finds none (llama_decode returns 1, having changed nothing), the engine frees, in this order:
1. the cells idle slots keep for later prompts (saved to the prefix cache first when it is on);
2. the youngest running sequence (the one that started last, vLLM's choice): its state goes to the prefix cache
   when that is on (else its cells are dropped and its tokens read again), its sampler and text decoder are kept,
   and its request waits first in line to go on from its prompt plus the tokens it wrote. Its text continues
   where it stopped and its usage counts what it had counted (an exact copy of its cells comes back from the
   cache; a re-read may round differently, as any prefix reuse in `all` mode: see reuse.py).
Then the step is decoded again. The oldest sequence is never pushed out for a younger one, so it always finishes.

A waiting request starts only while the pool keeps GROWTH_TOKENS free for every running sequence and it, once its
prompt is in: without that margin a resumed sequence would be pushed out again a few tokens later.
"""

from __future__ import annotations

import codecs
from collections import deque
from dataclasses import dataclass

import llama_cpp

from app.generation.kv.slots import Slot
from app.generation.request import GenerationRequest

#: Cells left free for each running sequence to grow into before a waiting request may start.
GROWTH_TOKENS = 64


@dataclass(eq=False, slots=True)
class Paused:
    """A sequence pushed out of the pool, as it goes on."""

    #: Its prompt, then the tokens it wrote (the last one not yet read: its logits choose the next).
    sequence: list[int]
    sampler: llama_cpp.llama_sampler_p | None
    decoder: codecs.IncrementalDecoder | None
    budget: int
    produced: int
    cached: int
    arrival: int
    top_logprobs: int | None
    persist: bool

    @classmethod
    def of(cls, slot: Slot) -> Paused:
        return cls(
            slot.tokens + slot.pending,
            slot.sampler,
            slot.decoder,
            slot.budget,
            slot.produced,
            slot.cached,
            slot.arrival,
            slot.top_logprobs,
            slot.persist,
        )

    def resume(self, slot: Slot) -> None:
        """Give the slot (its cells already hold what they can of `sequence`) the run state it left."""
        slot.sampler, slot.decoder = self.sampler, self.decoder
        slot.budget, slot.produced, slot.cached = self.budget, self.produced, self.cached
        slot.arrival, slot.top_logprobs, slot.persist = self.arrival, self.top_logprobs, self.persist


class KvPool:
    """The pool's size and what waits for room in it: requests pushed out (first) and the next request to start
    when it did not fit yet."""

    def __init__(self, tokens: int) -> None:
        #: Cells in the pool (0: no pool, each sequence has a window of its own and nothing is pushed out).
        self.tokens = tokens
        #: Requests that go before the fair order's: pushed-out ones, and one the pool had no room for yet.
        self.front: deque[GenerationRequest] = deque()
        self.paused: dict[GenerationRequest, Paused] = {}
        #: Pushed out so far (a counter for bench/ and tests).
        self.preempted = 0

    def demand(self, request: GenerationRequest) -> int:
        paused = self.paused.get(request)
        return len(paused.sequence if paused is not None else request.prompt)

    def fits(self, running: list[Slot], request: GenerationRequest) -> bool:
        """Whether `request` may start beside `running` (always when nothing runs: a prompt larger than the pool
        ends at once with `length`)."""
        if not self.tokens or not running:
            return True
        used = sum(slot.cells for slot in running) + self.demand(request)
        return used + GROWTH_TOKENS * (len(running) + 1) <= self.tokens

    def victim(self, running: list[Slot]) -> Slot | None:
        """The sequence to push out for room: the youngest, never the last one running."""
        if not self.tokens or len(running) < 2:
            return None
        return max(running, key=lambda slot: slot.arrival)

    def push_out(self, slot: Slot) -> GenerationRequest:
        """Keep the slot's run state and put its request first in line; the caller frees the slot."""
        assert slot.request is not None
        request = slot.request
        self.paused[request] = Paused.of(slot)
        # Victims go youngest first, so each one pushed out is older than those before it: it goes on first.
        self.front.appendleft(request)
        self.preempted += 1
        return request
