"""The context's sequences (slots) and their KV cells: which free slot a prompt takes and how much of it the
slot's cells or a saved state already hold, and what a finished or pushed-out sequence leaves in the prefix cache.

Every call is made on the engine's thread (llama.cpp's context is not shared).
"""

from __future__ import annotations

import codecs
import ctypes
import logging
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from app.generation.kv.prefix_cache import PrefixCache, common_prefix_length
from app.generation.kv.reuse import KvReuse
from app.generation.kv.window import saved_window_start, window_holds
from app.generation.request import GenerationRequest

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Slot:
    """One sequence of the context: the tokens its KV cells hold, and the request using it, if any."""

    seq_id: int
    tokens: list[int] = field(default_factory=list)
    #: The cache scope of the request that computed `tokens`' cells.
    scope: str = ""
    request: GenerationRequest | None = None
    pending: list[int] = field(default_factory=list)
    sampler: llama_cpp.llama_sampler_p | None = None
    decoder: codecs.IncrementalDecoder | None = None
    budget: int = 0
    produced: int = 0
    cached: int = 0
    #: When its request first started (a counter): the pool pushes out the youngest first (see kv/pool.py).
    arrival: int = 0
    #: Still reading its prompt (no token sampled yet).
    reading: bool = False
    #: Its cells are not in the prefix cache yet (a large state waits for an idle engine, see the engine's _finish).
    unsaved: bool = False
    #: Its state goes to the state files too when saved (its request's keep_state_file).
    persist: bool = False
    #: None: no logprobs (the default, fast path); else how many alternatives each token reports.
    top_logprobs: int | None = None

    @property
    def cells(self) -> int:
        """KV cells the sequence holds once its pending tokens are read."""
        return len(self.tokens) + len(self.pending)


class KvSlots:
    """The slots of one llama.cpp context, and what their cells share with prompts and the prefix cache."""

    def __init__(
        self, ctx: llama_cpp.llama_context_p, count: int, cache: PrefixCache | None, reuse: KvReuse, n_swa: int = 0
    ) -> None:
        self._ctx = ctx
        #: The model's attention window (0: none); see kv/window.py.
        self.n_swa = n_swa
        self._memory = llama_cpp.llama_get_memory(ctx)
        self.slots = [Slot(seq_id) for seq_id in range(count)]
        self.cache = cache
        self.reuse = reuse

    def running(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.request is not None]

    def has_free(self) -> bool:
        return any(slot.request is None for slot in self.slots)

    def unsaved(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.unsaved and slot.request is None]

    def take(self, scope: str, prompt: list[int], *, read_cache: bool) -> tuple[Slot, int]:
        """The free slot for `prompt` and how many of its leading tokens that slot's cells now hold (the rest it
        reads): the slot it gains most from (see choose), or a saved longer state restored there. Cells past that
        are dropped."""
        slot, shared = self.choose(scope, prompt)
        slot.unsaved = False
        reused = self.restore(slot, scope, prompt, shared) if read_cache else 0  # cold: its cells stay saved
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, reused, -1)
        slot.tokens = prompt[:reused]
        slot.scope = scope
        slot.pending = prompt[reused:]
        return slot, reused

    def choose(self, scope: str, prompt: list[int]) -> tuple[Slot, int]:
        """The free slot to take and the prefix its cells share with `prompt`: the one whose shared prefix most
        outweighs the cells taking it drops (which a later prompt of theirs would read again), so a short prompt
        that shares a few template tokens with a long cached one takes an empty slot instead (issue 34). On a tie,
        a slot whose cells are saved or empty: an unsaved state is lost when its slot is taken."""
        free = [(slot, self.shared_prefix(slot, scope, prompt)) for slot in self.slots if slot.request is None]

        def gain(candidate: tuple[Slot, int]) -> tuple[int, bool]:
            slot, shared = candidate
            return shared - (len(slot.tokens) - shared), not slot.unsaved

        return max(free, key=gain)

    def shared_prefix(self, slot: Slot, scope: str, prompt: list[int]) -> int:
        """How many leading prompt tokens the slot's cells hold that this scope may reuse."""
        if self.cache is None or not slot.tokens or slot.scope != scope:
            return 0
        return common_prefix_length(np.asarray(slot.tokens, dtype=np.int32), np.asarray(prompt, dtype=np.int32))

    def restore(self, slot: Slot, scope: str, prompt: list[int], shared: int) -> int:
        """How many leading prompt tokens the prompt reuses (never its last; exact mode: whole chunks; a sliding-
        window model: only where the window layers hold what comes next, see kv/window.py): of the slot's own
        cells (`shared` of them match), or of a saved state of the same scope restored in their place when it
        serves longer."""
        if self.cache is None:
            self.clear(slot)
            return 0
        length = len(prompt)
        own = self.reuse.usable(shared, length)
        if own < len(slot.tokens) and not window_holds(self.n_swa, self.window_start(slot), own):
            own = 0
        match = self.cache.best_match(scope, prompt)
        if match is None:
            return own
        saved = match[1]
        usable = self.reuse.usable(match[0], length)
        start = saved_window_start(self.n_swa, len(saved.tokens))
        # NOTE: exact mode takes no saved state whose window cells llama.cpp cut: restored, they sit in other cells
        # than a cold read puts them in, and attention sums them in another order (the last digits differ).
        if (self.reuse.exact and start) or (usable < len(saved.tokens) and not window_holds(self.n_swa, start, usable)):
            usable = 0
        if usable <= own:
            return own
        self.clear(slot)
        # llama.cpp only reads the state: no copy of a bytearray (what save keeps).
        buffer = ctypes.c_uint8 * len(saved.data)
        data = (
            buffer.from_buffer(saved.data) if isinstance(saved.data, bytearray) else buffer.from_buffer_copy(saved.data)
        )
        if llama_cpp.llama_state_seq_set_data(self._ctx, data, len(saved.data), slot.seq_id):
            slot.tokens = saved.tokens.tolist()
            if usable == len(slot.tokens) or window_holds(self.n_swa, self.window_start(slot), usable):
                return usable
            logger.warning("a restored prefix lacks window cells; reading the prompt in full")
        else:
            logger.warning("could not restore a saved prefix; reading the prompt in full")
        self.clear(slot)
        return 0

    def window_start(self, slot: Slot) -> int:
        """The first position the slot's window layers hold (0 without a window: every cell is there)."""
        if self.n_swa <= 0 or not slot.tokens:
            return 0
        return int(llama_cpp.llama_memory_seq_pos_min(self._memory, slot.seq_id))

    def clear(self, slot: Slot) -> None:
        """Drop every KV cell of the slot's sequence."""
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
        slot.tokens, slot.unsaved = [], False

    def keep(self, slot: Slot, prompt_length: int) -> None:
        """Drop a finished sequence's cells that later prompts may not reuse (exact mode: its answer's)."""
        kept = self.reuse.kept(len(slot.tokens), prompt_length)
        if kept < len(slot.tokens):
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, kept, -1)
            slot.tokens = slot.tokens[:kept]

    def state_size(self, slot: Slot) -> int:
        return int(llama_cpp.llama_state_seq_get_size(self._ctx, slot.seq_id))

    def save(self, slot: Slot, size: int | None = None, *, persist: bool | None = None) -> None:
        """Copy the slot's cells into the prefix cache (and its state files when `persist`, by default its
        request's keep_state_file)."""
        slot.unsaved = False
        if self.cache is None or not slot.tokens:
            return
        if size is None:
            size = self.state_size(slot)
        # One copy: llama.cpp writes straight into the bytes the cache keeps.
        data = bytearray(size)
        written = llama_cpp.llama_state_seq_get_data(
            self._ctx, (ctypes.c_uint8 * size).from_buffer(data), size, slot.seq_id
        )
        del data[written:]
        self.cache.put(slot.scope, slot.tokens, data, persist=slot.persist if persist is None else persist)

    def evict_idle(self) -> bool:
        """Free the cells idle slots keep for later prompts (saved to the prefix cache first when it is on, as a
        finished sequence's are); False when none held any."""
        idle = [slot for slot in self.slots if slot.request is None and slot.tokens]
        for slot in idle:
            if slot.unsaved:
                self.save(slot)
            self.clear(slot)
        return bool(idle)
