"""The llama.cpp context's parameters: how many cells, in how many streams, shared or not, and the window layers'
cache (kv/window.py)."""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp

from app.generation.kv.reuse import KvReuseMode
from app.generation.kv.window import KvGeometry


@dataclass(frozen=True, slots=True)
class ContextLayout:
    """What the engine asks of llama.cpp's context (see params)."""

    #: Cells per sequence (the model's context, or the configured one).
    n_ctx: int
    slots: int
    batch_tokens: int
    kv_reuse: KvReuseMode = "all"
    kv_unified: bool = False
    #: Cells of one unified pool every sequence grows into (kv/pool.py); 0: a window of n_ctx a sequence.
    kv_pool: int = 0
    #: The model's attention window (0: none), and whether its layers get a full-size cache anyway.
    n_swa: int = 0
    swa_full: bool = False

    @property
    def pooled(self) -> bool:
        return self.kv_pool > 0 and self.kv_reuse != "exact"

    @property
    def unified(self) -> bool:
        # Exact reuse needs split windows: in a pool a sequence's cells sit wherever other sequences left room,
        # and attention sums in cell order.
        return self.pooled or (self.kv_unified and self.kv_reuse != "exact")

    @property
    def full_window(self) -> bool:
        """A full-size cache for the window layers: asked for, or exact mode (a cell must sit where a cold read
        puts it, and a window-sized cache writes over the cells that left the window)."""
        return self.n_swa > 0 and (self.swa_full or self.kv_reuse == "exact")

    @property
    def cells(self) -> int:
        return self.kv_pool if self.pooled else self.n_ctx * self.slots

    @property
    def streams(self) -> int:
        return 1 if self.unified else self.slots

    def cache_bytes(self, geometry: KvGeometry) -> int:
        """The KV cache this context holds, for a model of that geometry."""
        per_stream = self.cells // self.streams
        return geometry.cache_bytes(per_stream, self.streams, self.batch_tokens, self.slots, swa_full=self.full_window)

    def params(
        self, *, n_threads: int | None, n_threads_batch: int | None, on_cpu: bool
    ) -> llama_cpp.llama_context_params:
        # n_ctx cells per sequence: split, each sequence a window of its own; unified, one pool they share (as
        # llama-server), so llama.cpp decodes all their tokens in one ubatch. `kv_pool` cells: one unified pool of
        # that size, each sequence growing into it (kv/pool.py).
        params: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
        params.n_ctx = self.cells
        params.n_seq_max = self.slots
        params.kv_unified = self.unified
        params.swa_full = self.full_window
        params.n_batch = params.n_ubatch = self.batch_tokens
        if n_threads:
            params.n_threads = params.n_threads_batch = n_threads
        params.n_threads_batch = n_threads_batch or params.n_threads_batch  # prompts may use more cores
        params.no_perf = True
        if on_cpu:
            # NOTE: on the CPU, llama.cpp's flash attention takes a tiled path for large batches only, so a
            # prompt read in two chunks (a reused prefix, then the rest) rounds differently from one read whole,
            # and temperature 0 answers drift. Without it the two agree exactly, at no measured cost here.
            params.flash_attn_type = 0
        return params
