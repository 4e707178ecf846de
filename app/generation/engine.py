"""The llama.cpp generation loop: one context decoding up to `slots` sequences together (continuous batching).

Each step decodes one batch holding the next token of every generating sequence plus a chunk of the prompts
still being read (shared between them, the shortest first: a short prompt is not held back by a long one being
read, see kv_reuse.prompt_shares), then samples each sequence from its own row of logits. On a CPU one batched step over
several sequences costs little more than one token of one, so throughput grows with the number of streams;
on a GPU even more so. A lean loop on llama.cpp's C API: no per-token copy of the logits, no Python-side
sampling.

Prompts reuse KV state: a new sequence takes the free slot whose cells share the longest prefix with its
prompt, or restores a longer one from the PrefixCache, and prefills only the rest. By default every cell is
kept, the answer's included, so a chained turn reads only its new tokens; in exact mode a hit gives exactly
a cold read's output (see kv_reuse.py). Reuse never crosses a request's `cache_scope` (its tenant): a slot's
cells and saved states serve only prompts of the scope that computed them.

Requests beyond the free slots wait in the fair order (job.py's FairOrder: class, then tenants in turn): a worker
can hold more jobs than sequences (its model's queue and its own), and one tenant's must not fill the line.

All llama.cpp calls happen on the engine's own thread; `submit` and the request's `cancelled` flag are the
only ways in, `emit` the only way out.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import queue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp
import numpy as np

from app.config import Settings
from app.generation.job import FairOrder, JobClass
from app.generation.kv_reuse import KvReuse, KvReuseMode, prompt_shares
from app.generation.prefix_cache import PrefixCache, StateFiles, common_prefix_length
from app.generation.registry import ModelSpec
from app.generation.sampling import sampler_chain, scored_piece
from app.generation.types import EngineError, Finish, FinishReason, GenerationFailed, GenerationOutput, SamplingParams

logger = logging.getLogger(__name__)

#: Most tokens one llama_decode call takes; long prompts are read in chunks of this, between decode steps.
BATCH_TOKENS = 512
#: A finished sequence's KV state larger than this is saved to the prefix cache only once no other sequence
#: runs: the copy holds up every running stream (a 7.6k-token SmolLM2 prompt is ~170 MB, a pause of ~200 ms
#: measured by bench/prefix_save.py). Smaller states (~1.4k SmolLM2 tokens) copy in a few ms and are saved at once.
SAVE_WHILE_RUNNING_BYTES = 32 * 2**20
#: Most prompt tokens a step reads while other sequences generate: a step's time grows with its prompt tokens
#: (and with their context: attention), and every running stream waits for it. A 7k-token prompt read in
#: 512-token chunks beside a stream gave it gaps of seconds on the loaded 2-core machine (bench/prefix_save.py);
#: 128-token chunks cut that by ~4x, and prefill alone still takes 512 at once.
PROMPT_TOKENS_BESIDE_STREAMS = 128
_PIECE_BUFFER = 256


def default_gpu_layers() -> int:
    """All layers on the GPU when llama.cpp was built with a GPU backend, else none."""
    return -1 if llama_cpp.llama_supports_gpu_offload() else 0


def concurrency(settings: Settings) -> int:
    """Sequences decoded together. By default: on a CPU batching gains little past 4 (measured in bench/), a
    GPU gains more."""
    return settings.worker_concurrency or (8 if llama_cpp.llama_supports_gpu_offload() else 4)


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


@dataclass(eq=False)
class _Slot:
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
    #: Still reading its prompt (no token sampled yet).
    reading: bool = False
    #: Its cells are not in the prefix cache yet (a large state waits for an idle engine, see _finish).
    unsaved: bool = False
    #: Its state goes to the state files too when saved (its request's keep_state_file).
    persist: bool = False
    #: None: no logprobs (the default, fast path); else how many alternatives each token reports.
    top_logprobs: int | None = None


class LlamaEngine:
    def __init__(
        self,
        model_path: Path,
        *,
        n_ctx: int | None,
        n_threads: int | None,
        n_threads_batch: int | None = None,
        n_gpu_layers: int | None = None,
        slots: int = 1,
        prefix_cache: PrefixCache | None = None,
        kv_reuse: KvReuseMode = "all",
        kv_unified: bool = False,
    ) -> None:
        # llama.cpp reports every tensor and buffer as it loads; keep only its errors.
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        llama_cpp.llama_backend_init()
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = default_gpu_layers() if n_gpu_layers is None else n_gpu_layers
        self._model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), model_params)
        if not self._model:
            raise EngineError(f"llama.cpp could not load {model_path}")
        self.n_ctx: int = n_ctx or llama_cpp.llama_model_n_ctx_train(self._model)
        params = llama_cpp.llama_context_default_params()
        # n_ctx cells per sequence: split, each sequence a window of its own; unified, one pool they share (as
        # llama-server), so llama.cpp decodes all their tokens in one ubatch. Exact reuse needs split windows: in
        # a pool a sequence's cells sit wherever other sequences left room, and attention sums in cell order.
        params.n_ctx = self.n_ctx * slots
        params.n_seq_max = slots
        params.kv_unified = kv_unified and kv_reuse != "exact"
        params.n_batch = params.n_ubatch = BATCH_TOKENS
        if n_threads:
            params.n_threads = params.n_threads_batch = n_threads
        params.n_threads_batch = n_threads_batch or params.n_threads_batch  # prompts may use more cores
        params.no_perf = True
        if model_params.n_gpu_layers == 0:
            # NOTE: on the CPU, llama.cpp's flash attention takes a tiled path for large batches only, so a
            # prompt read in two chunks (a reused prefix, then the rest) rounds differently from one read whole,
            # and temperature 0 answers drift. Without it the two agree exactly, at no measured cost here.
            params.flash_attn_type = 0
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise EngineError("llama.cpp could not create a context (out of memory?)")
        self.n_ctx = min(self.n_ctx, llama_cpp.llama_n_ctx_seq(self._ctx))
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(BATCH_TOKENS, 0, 1)
        self._piece = (ctypes.c_char * _PIECE_BUFFER)()
        self._slots = [_Slot(seq_id) for seq_id in range(slots)]
        self._cache = prefix_cache
        self._reuse = KvReuse(kv_reuse, BATCH_TOKENS)
        self._requests: queue.SimpleQueue[GenerationRequest | None] = queue.SimpleQueue()
        #: Submitted requests waiting for a free slot (engine thread only).
        self._waiting: FairOrder[GenerationRequest] = FairOrder()
        self._thread = threading.Thread(target=self._run, name="llama-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_settings(cls, settings: Settings, spec: ModelSpec) -> LlamaEngine:
        """`spec`'s model, with the deployment's threads, concurrency and prefix cache (one cache per model)."""
        cache_bytes = settings.prefix_cache_mb * 2**20
        files = None
        if settings.prefix_cache_dir is not None and cache_bytes:
            model_dir = re.sub(r"[^A-Za-z0-9._-]", "_", spec.id)
            files = StateFiles(settings.prefix_cache_dir / model_dir, settings.prefix_cache_dir_mb * 2**20)
        return cls(
            spec.path,
            n_ctx=spec.n_ctx,
            n_threads=settings.n_threads,
            n_threads_batch=settings.n_threads_batch,
            n_gpu_layers=spec.n_gpu_layers,
            slots=concurrency(settings),
            prefix_cache=PrefixCache(cache_bytes, files) if cache_bytes else None,
            kv_reuse=settings.kv_reuse,
        )

    @property
    def slots(self) -> int:
        return len(self._slots)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes one token's cells take (f16 keys and values in every layer)."""
        head_dim = llama_cpp.llama_model_n_embd(self._model) // llama_cpp.llama_model_n_head(self._model)
        kv_width = head_dim * llama_cpp.llama_model_n_head_kv(self._model)
        return int(llama_cpp.llama_model_n_layer(self._model) * 2 * kv_width * 2)

    @property
    def cached_bytes(self) -> int:
        """Memory held by saved prefix states (read from any thread: one int)."""
        return self._cache.size_bytes if self._cache is not None else 0

    def tokenize(self, text: str) -> list[int]:
        """Text the model wrote, as tokens to append to its prompt (a takeover continues from them)."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        tokens = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(self._vocab, data, len(data), tokens, capacity, False, True)
        if count < 0:
            raise EngineError(f"could not tokenize {len(data)} bytes")
        return list(tokens[:count])

    def submit(self, request: GenerationRequest) -> None:
        self._requests.put(request)

    def close(self) -> None:
        """Stop the loop (running generations end as cancelled) and free llama.cpp's memory."""
        if self._thread.is_alive():
            self._requests.put(None)
            self._thread.join()
        if self._cache is not None and self._cache.files is not None:
            self._cache.files.close()
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)
        llama_cpp.llama_model_free(self._model)

    # The engine thread.

    def _run(self) -> None:
        while True:
            if not self._admit(wait=not self._busy() and not self._unsaved()):
                break
            if self._busy():
                try:
                    self._step()
                except Exception as error:  # a failed decode ends every generation in it, not the engine
                    logger.exception("decode step failed")
                    self._fail_all(f"generation failed: {error}")
            else:
                # Idle, nothing waiting: save the states that were too large to copy while others ran.
                for slot in self._unsaved()[:1]:
                    self._save_prefix(slot)
        for slot in self._slots:
            if slot.request is not None:
                self._finish(slot, "cancelled")
        while self._waiting:
            request = self._waiting.pop()
            request.emit(Finish("cancelled", len(request.prompt), 0, 0))

    def _busy(self) -> bool:
        return any(slot.request is not None for slot in self._slots)

    def _unsaved(self) -> list[_Slot]:
        return [slot for slot in self._slots if slot.unsaved and slot.request is None]

    def _admit(self, *, wait: bool) -> bool:
        """Take what was submitted into the waiting line (blocking for one when `wait` and none waits), then start
        waiting requests on free slots in the fair order; False once close() was called."""
        while True:
            try:
                submitted = self._requests.get(block=wait and not self._waiting)
            except queue.Empty:
                break
            if submitted is None:
                return False
            self._waiting.push(submitted.job_class, submitted.cache_scope, submitted)
            wait = False
        if self._waiting:  # a cancelled sequence's slot goes to a waiting request now, not a step later
            for slot in self._slots:
                if slot.request is not None and slot.request.cancelled.is_set():
                    self._finish(slot, "cancelled")
        while self._waiting and any(slot.request is None for slot in self._slots):
            request = self._waiting.pop()
            try:
                self._start(request)
            except Exception as error:
                logger.exception("could not start a generation")
                request.emit(GenerationFailed(f"generation failed: {error}"))
        return True

    def _start(self, request: GenerationRequest) -> None:
        prompt = request.prompt
        budget = self.n_ctx - len(prompt)
        if request.sampling.max_output_tokens is not None:
            budget = min(budget, request.sampling.max_output_tokens)
        if request.cancelled.is_set() or (budget <= 0 and not request.sampling.prefill_only):
            reason: FinishReason = "cancelled" if request.cancelled.is_set() else "length"
            request.emit(Finish(reason, len(prompt), 0, 0))
            return
        scope = request.cache_scope
        free = [(slot, self._shared_prefix(slot, scope, prompt)) for slot in self._slots if slot.request is None]
        # On a tie (no prefix shared, say) a slot whose cells are saved or empty: an unsaved state is lost when
        # its slot is taken.
        slot, reused = max(free, key=lambda candidate: (candidate[1], not candidate[0].unsaved))
        slot.unsaved = False
        if not request.sampling.read_cache:  # read cold: its cells are still saved for later prompts
            reused = 0
        else:
            reused = self._reuse.usable(self._restore_prefix(slot, scope, prompt, reused), len(prompt))
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, reused, -1)
        slot.tokens = prompt[:reused]
        slot.scope = scope
        slot.pending = prompt[reused:]
        resumed = request.sampling.resumed_output_tokens
        slot.sampler = self._sampler(request.sampling, prompt[len(prompt) - resumed :] if resumed else [])
        slot.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        slot.budget, slot.produced, slot.cached = budget, 0, reused
        slot.top_logprobs = request.sampling.top_logprobs
        slot.persist = request.sampling.keep_state_file
        slot.reading = True
        slot.request = request

    def _shared_prefix(self, slot: _Slot, scope: str, prompt: list[int]) -> int:
        """How many leading prompt tokens the slot's cells hold that this scope may reuse."""
        if self._cache is None or not slot.tokens or slot.scope != scope:
            return 0
        return common_prefix_length(np.asarray(slot.tokens, dtype=np.int32), np.asarray(prompt, dtype=np.int32))

    def _restore_prefix(self, slot: _Slot, scope: str, prompt: list[int], reused: int) -> int:
        """How many leading prompt tokens the slot's KV cells hold (`reused` as it is), after restoring a
        longer saved state of the same scope."""
        if self._cache is None:
            self._clear(slot)
            return 0
        match = self._cache.best_match(scope, prompt)
        if match is None or self._reuse.usable(match[0], len(prompt)) <= self._reuse.usable(reused, len(prompt)):
            return reused
        shared, saved = match
        self._clear(slot)
        # llama.cpp only reads the state: no copy of a bytearray (what _save_prefix keeps).
        buffer = ctypes.c_uint8 * len(saved.data)
        data = (
            buffer.from_buffer(saved.data) if isinstance(saved.data, bytearray) else buffer.from_buffer_copy(saved.data)
        )
        if llama_cpp.llama_state_seq_set_data(self._ctx, data, len(saved.data), slot.seq_id):
            slot.tokens = saved.tokens.tolist()
            return shared
        logger.warning("could not restore a saved prefix; reading the prompt in full")
        self._clear(slot)
        return 0

    def _clear(self, slot: _Slot) -> None:
        """Drop every KV cell of the slot's sequence."""
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
        slot.tokens, slot.unsaved = [], False

    def _sampler(self, sampling: SamplingParams, written: list[int]) -> llama_cpp.llama_sampler_p:
        """The sampler chain for `sampling`, having accepted `written` (the output of an earlier run)."""
        return sampler_chain(self._vocab, self._n_vocab, self.n_ctx, sampling, written)

    def _step(self) -> None:
        """One llama_decode over every running sequence, then one sampled token for each that is due one."""
        running: list[_Slot] = []
        for slot in self._slots:
            if slot.request is None:
                continue
            if slot.request.cancelled.is_set():
                self._finish(slot, "cancelled")
            else:
                running.append(slot)
        generating = [slot for slot in running if not slot.reading]
        reading = [slot for slot in running if slot.reading]
        if self._reuse.exact:
            # A prompt chunk shares its llama_decode with nothing: llama.cpp would split it into ubatches shaped
            # by the other sequences' tokens, and its cells would round differently from a cold read's. So one
            # prompt reads a chunk a step: the one with the fewest tokens left, so that a short prompt admitted
            # beside a long one is read in a chunk or two (the long one waits that long; see prompt_shares).
            self._decode(generating, [])
            if reading:
                self._decode([], [min(reading, key=lambda slot: len(slot.pending))])
        else:
            # Generating sequences first (one token each), then prompts in chunks, so a long prompt never
            # stalls the others for more than one chunk; the prompts share the chunk (prompt_shares).
            self._decode(generating, reading)

    def _decode(self, generating: list[_Slot], reading: list[_Slot]) -> None:
        batch = self._batch
        used = 0
        sampled: list[tuple[_Slot, int]] = []
        for slot in generating:
            used = self._put(slot, 1, used, sampled)
        limit = min(used + PROMPT_TOKENS_BESIDE_STREAMS if used else BATCH_TOKENS, BATCH_TOKENS)
        shares = prompt_shares([len(slot.pending) for slot in reading], max(limit - used, 0))
        for slot, share in zip(reading, shares, strict=True):
            if share:
                count = self._reuse.chunk_length(len(slot.tokens), len(slot.pending), share)
                used = self._put(slot, count, used, sampled)
        if not used:
            return
        batch.n_tokens = used
        status = llama_cpp.llama_decode(self._ctx, batch)
        if status != 0:
            raise EngineError(f"llama_decode returned {status}")
        for slot, index in sampled:
            assert slot.request is not None
            if slot.request.sampling.prefill_only:  # its prompt's cells are computed: nothing to sample
                self._finish(slot, "stop")
                continue
            # Only requests that asked for logprobs read the logits row here (a copy, taken before sampling).
            logits = self._logits_row(index) if slot.top_logprobs is not None else None
            self._advance(slot, llama_cpp.llama_sampler_sample(slot.sampler, self._ctx, index), logits)

    def _put(self, slot: _Slot, count: int, used: int, sampled: list[tuple[_Slot, int]]) -> int:
        """Add the slot's next `count` pending tokens to the batch from index `used`; the new batch length."""
        batch = self._batch
        start = len(slot.tokens)
        for offset, token in enumerate(slot.pending[:count]):
            index = used + offset
            batch.token[index] = token
            batch.pos[index] = start + offset
            batch.n_seq_id[index] = 1
            batch.seq_id[index][0] = slot.seq_id
            batch.logits[index] = False
        used += count
        slot.tokens.extend(slot.pending[:count])
        slot.pending = slot.pending[count:]
        if not slot.pending:
            batch.logits[used - 1] = True
            sampled.append((slot, used - 1))
            slot.reading = False
        return used

    def _logits_row(self, index: int) -> np.ndarray:
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, index), shape=(self._n_vocab,))
        return row.astype(np.float64)

    def _token_bytes(self, token: int) -> bytes:
        length = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece, _PIECE_BUFFER, 0, False)
        return self._piece.raw[: max(length, 0)]

    def _advance(self, slot: _Slot, token: int, logits: np.ndarray | None = None) -> None:
        request, decoder = slot.request, slot.decoder
        assert request is not None and decoder is not None
        if llama_cpp.llama_vocab_is_eog(self._vocab, token):
            self._finish(slot, "stop")
            return
        slot.produced += 1
        token_bytes = self._token_bytes(token)
        piece = decoder.decode(token_bytes)
        if logits is not None and slot.top_logprobs is not None:
            # Sent even when the token only starts a multi-byte character (text ""), so every token is there.
            request.emit(scored_piece(piece, token, token_bytes, logits, slot.top_logprobs, self._token_bytes))
        elif piece:
            request.emit(piece)
        if slot.produced >= slot.budget:
            self._finish(slot, "length")
        elif request.cancelled.is_set():
            self._finish(slot, "cancelled")
        else:
            slot.pending = [token]

    def _finish(self, slot: _Slot, reason: FinishReason) -> None:
        request, decoder = slot.request, slot.decoder
        assert request is not None and decoder is not None
        tail = decoder.decode(b"", final=True)
        if tail:
            request.emit(tail)
        self._release(slot)
        kept = self._reuse.kept(len(slot.tokens), len(request.prompt))
        if kept < len(slot.tokens):
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, kept, -1)
            slot.tokens = slot.tokens[:kept]
        if self._cache is not None and slot.tokens:
            size = llama_cpp.llama_state_seq_get_size(self._ctx, slot.seq_id)
            if size <= SAVE_WHILE_RUNNING_BYTES or not self._busy():
                self._save_prefix(slot, size)
            else:
                slot.unsaved = True
        request.emit(Finish(reason, len(request.prompt), slot.cached, slot.produced))

    def _release(self, slot: _Slot) -> None:
        if slot.sampler is not None:
            llama_cpp.llama_sampler_free(slot.sampler)
        slot.request, slot.sampler, slot.decoder, slot.pending = None, None, None, []
        slot.top_logprobs, slot.reading = None, False

    def _save_prefix(self, slot: _Slot, size: int | None = None) -> None:
        slot.unsaved = False
        if self._cache is None or not slot.tokens:
            return
        if size is None:
            size = llama_cpp.llama_state_seq_get_size(self._ctx, slot.seq_id)
        # One copy: llama.cpp writes straight into the bytes the cache keeps.
        data = bytearray(size)
        written = llama_cpp.llama_state_seq_get_data(
            self._ctx, (ctypes.c_uint8 * size).from_buffer(data), size, slot.seq_id
        )
        del data[written:]
        self._cache.put(slot.scope, slot.tokens, data, persist=slot.persist)

    def _fail_all(self, message: str) -> None:
        for slot in self._slots:
            if slot.request is not None:
                request = slot.request
                self._release(slot)
                self._clear(slot)
                request.emit(GenerationFailed(message))
