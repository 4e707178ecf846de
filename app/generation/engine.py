"""The llama.cpp generation loop: one context decoding up to `slots` sequences together (continuous batching).

Each step decodes one batch holding the next token of every generating sequence plus a chunk of the prompts
still being read (shared between them, the shortest first: a short prompt is not held back by a long one being
read, see kv.reuse.prompt_shares), then samples each sequence from its own row of logits. On a CPU one batched step over
several sequences costs little more than one token of one, so throughput grows with the number of streams;
on a GPU even more so. A lean loop on llama.cpp's C API: no per-token copy of the logits, no Python-side
sampling.

Prompts reuse KV state: a new sequence takes the free slot whose cells share the longest prefix with its
prompt, or restores a longer one from the PrefixCache, and prefills only the rest. By default every cell is
kept, the answer's included, so a chained turn reads only its new tokens; in exact mode a hit gives exactly
a cold read's output (see kv/reuse.py). Reuse never crosses a request's `cache_scope` (its tenant): a slot's
cells and saved states serve only prompts of the scope that computed them. The slots' cells are kept in
kv/slots.py.

With RESPONSES_KV_POOL_TOKENS the sequences share one pool of cells, each growing as far as the model's context
while there is room; when there is none, idle cells and then the youngest sequence make way (kv/pool.py).

Requests beyond the free slots wait in the fair order (job.py's FairOrder: each tenant's jobs of a class a flow, the
flows taking turns by their classes' weights): a worker
can hold more jobs than sequences (its model's queue and its own), and one tenant's must not fill the line.

All llama.cpp calls happen on the engine's own thread; `submit` and the request's `cancelled` flag are the
only ways in, `emit` the only way out.
"""

from __future__ import annotations

import codecs
import ctypes
import itertools
import logging
import queue
import re
import threading
from pathlib import Path

import llama_cpp
import numpy as np

from app.config import Settings
from app.generation.dialects.families import dialect_named
from app.generation.job import ClassWeights, FairOrder, class_weights
from app.generation.kv.context import ContextLayout
from app.generation.kv.pool import KvPool
from app.generation.kv.prefix_cache import PrefixCache, StateFiles
from app.generation.kv.reuse import KvReuse, KvReuseMode, prompt_shares
from app.generation.kv.slots import KvSlots, Slot
from app.generation.kv.window import geometry_of, model_metadata, report_load, report_unload
from app.generation.registry import ModelSpec
from app.generation.request import GenerationRequest as GenerationRequest  # where callers import it from
from app.generation.sampling import sampler_chain, scored_piece
from app.generation.types import EngineError, Finish, FinishReason, GenerationFailed, SamplingParams

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
        kv_pool: int = 0,
        weights: ClassWeights | None = None,
        swa_full: bool = False,
        name: str = "",
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
        n_swa = max(llama_cpp.llama_model_n_swa(self._model), 0)
        self.geometry = geometry_of(model_metadata(self._model), n_swa)
        layout = ContextLayout(self.n_ctx, slots, BATCH_TOKENS, kv_reuse, kv_unified, kv_pool, n_swa, swa_full)
        params = layout.params(
            n_threads=n_threads, n_threads_batch=n_threads_batch, on_cpu=model_params.n_gpu_layers == 0
        )
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise EngineError("llama.cpp could not create a context (out of memory?)")
        self.n_ctx = min(self.n_ctx, llama_cpp.llama_n_ctx_seq(self._ctx))
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._batch = llama_cpp.llama_batch_init(BATCH_TOKENS, 0, 1)
        self._piece = (ctypes.c_char * _PIECE_BUFFER)()
        self._pieces: dict[int, bytes] = {}  # each token's bytes, made once: _token_bytes is on every token's path
        self._dialect_tokens: dict[str, tuple[frozenset[int], frozenset[int]]] = {}
        self._cache = prefix_cache
        self._reuse = KvReuse(kv_reuse, BATCH_TOKENS)
        self._kv = KvSlots(self._ctx, slots, prefix_cache, self._reuse, n_swa)
        #: Bytes of the context's KV cache and of the model's weights (the load's log line, and metrics).
        self.kv_cache_bytes = layout.cache_bytes(self.geometry)
        self.model_bytes: int = llama_cpp.llama_model_size(self._model)
        self.name = name or model_path.name
        report_load(self.name, self.geometry, self.kv_cache_bytes, self.model_bytes, layout.full_window)
        self._slots = self._kv.slots
        self.pool = KvPool(llama_cpp.llama_n_ctx(self._ctx) if layout.pooled else 0)
        self._arrivals = itertools.count()
        self._requests: queue.SimpleQueue[GenerationRequest | None] = queue.SimpleQueue()
        #: Submitted requests waiting for a free slot (engine thread only).
        self._waiting: FairOrder[GenerationRequest] = FairOrder(weights)
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
            kv_pool=settings.kv_pool_tokens,
            weights=class_weights(settings),
            swa_full=settings.kv_swa_full,
            name=spec.id,
        )

    @property
    def slots(self) -> int:
        return len(self._slots)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes one token's cells take (f16 keys and values of the real head sizes, every layer)."""
        return self.geometry.bytes_per_token

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
        report_unload(self.name)

    # The engine thread.

    def _run(self) -> None:
        while True:
            if not self._admit(wait=not self._busy() and not self._kv.unsaved()):
                break
            if self._busy():
                try:
                    self._step()
                except Exception as error:  # a failed decode ends every generation in it, not the engine
                    logger.exception("decode step failed")
                    self._fail_all(f"generation failed: {error}")
            else:
                # Idle, nothing waiting: save the states that were too large to copy while others ran.
                for slot in self._kv.unsaved()[:1]:
                    self._kv.save(slot)
        for slot in self._slots:
            if slot.request is not None:
                self._finish(slot, "cancelled")
        while (request := self._next_waiting()) is not None:
            self._end_waiting(request, "cancelled")

    def _busy(self) -> bool:
        return any(slot.request is not None for slot in self._slots)

    def _admit(self, *, wait: bool) -> bool:
        """Take what was submitted into the waiting line (blocking for one when `wait` and none waits), then start
        waiting requests on free slots (pushed-out ones first, then in the fair order) while the pool has room;
        False once close() was called."""
        while True:
            try:
                submitted = self._requests.get(block=wait and not self._waiting and not self.pool.front)
            except queue.Empty:
                break
            if submitted is None:
                return False
            self._waiting.push(submitted.job_class, submitted.cache_scope, submitted)
            wait = False
        if self._waiting or self.pool.front:  # a cancelled sequence's slot goes to a waiting request now
            for slot in self._slots:
                if slot.request is not None and slot.request.cancelled.is_set():
                    self._finish(slot, "cancelled")
        while self._kv.has_free() and (request := self._next_waiting()) is not None:
            if not request.cancelled.is_set() and not self.pool.fits(self._kv.running(), request):
                self.pool.front.appendleft(request)  # it starts first once running sequences make room
                break
            try:
                self._start(request)
            except Exception as error:
                logger.exception("could not start a generation")
                request.emit(GenerationFailed(f"generation failed: {error}"))
        return True

    def _next_waiting(self) -> GenerationRequest | None:
        if self.pool.front:
            return self.pool.front.popleft()
        return self._waiting.pop() if self._waiting else None

    def _end_waiting(self, request: GenerationRequest, reason: FinishReason) -> None:
        """End a request that holds no slot (one pushed out with what it had written)."""
        paused = self.pool.paused.pop(request, None)
        if paused is None:
            request.emit(Finish(reason, len(request.prompt), 0, 0))
            return
        if paused.sampler is not None:
            llama_cpp.llama_sampler_free(paused.sampler)
        tail = paused.decoder.decode(b"", final=True) if paused.decoder is not None else ""
        if tail:
            request.emit(tail)
        request.emit(Finish(reason, len(request.prompt), paused.cached, paused.produced))

    def _start(self, request: GenerationRequest) -> None:
        paused = self.pool.paused.get(request)
        if paused is not None:
            if request.cancelled.is_set():
                self._end_waiting(request, "cancelled")
                return
            # Pushed out of the pool: it goes on from its prompt and what it wrote, its cells restored or re-read.
            del self.pool.paused[request]
            slot, _ = self._kv.take(request.cache_scope, paused.sequence, read_cache=True)
            paused.resume(slot)
            slot.reading, slot.request = True, request
            return
        prompt = request.prompt
        budget = self.n_ctx - len(prompt)
        if request.sampling.max_output_tokens is not None:
            budget = min(budget, request.sampling.max_output_tokens)
        if request.cancelled.is_set() or (budget <= 0 and not request.sampling.prefill_only):
            reason: FinishReason = "cancelled" if request.cancelled.is_set() else "length"
            request.emit(Finish(reason, len(prompt), 0, 0))
            return
        request.end_tokens, request.markup_tokens = self._tokens_of(request.dialect)
        if request.sampling.prefill_only and len(prompt) > 1:
            # A warm-up leaves its last token to the turn it warms (which reads it anyway): its saved state is
            # then exactly the prefix that turn reuses, which a sliding-window model's needs (kv/window.py).
            prompt = prompt[:-1]
        slot, reused = self._kv.take(request.cache_scope, prompt, read_cache=request.sampling.read_cache)
        resumed = request.sampling.resumed_output_tokens
        slot.sampler = self._sampler(request.sampling, prompt[len(prompt) - resumed :] if resumed else [])
        slot.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        slot.budget, slot.produced, slot.cached = budget, 0, reused
        slot.arrival = next(self._arrivals)
        slot.top_logprobs = request.sampling.top_logprobs
        slot.persist = request.sampling.keep_state_file
        slot.reading = True
        slot.request = request

    def _make_room(self, running: list[Slot]) -> None:
        """Free pool cells for a step that found none: idle slots' cells, else the youngest running sequence's
        (pushed out to go on later, see kv/pool.py); EngineError when one sequence alone fills the pool."""
        if self._kv.evict_idle():
            return
        victim = self.pool.victim(running)
        if victim is None:
            raise EngineError(f"one sequence needs more than the KV pool's {self.pool.tokens} cells")
        self.pool.push_out(victim)
        if self._cache is not None:  # its cells come back from the cache, exactly, when it goes on
            self._kv.save(victim, persist=False)
        victim.sampler = None  # its request keeps it
        self._release(victim)
        self._kv.clear(victim)

    def _sampler(self, sampling: SamplingParams, written: list[int]) -> llama_cpp.llama_sampler_p:
        """The sampler chain for `sampling`, having accepted `written` (the output of an earlier run)."""
        return sampler_chain(self._vocab, self._n_vocab, self.n_ctx, sampling, written)

    def _step(self) -> None:
        """One llama_decode over every running sequence, then one sampled token for each that is due one."""
        running: list[Slot] = []
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
            # stalls the others for more than one chunk; the prompts share the chunk (prompt_shares). A full
            # pool makes room (kv/pool.py) and the step goes again without whoever was pushed out.
            while not self._decode(generating, reading):
                self._make_room(running)
                running = self._kv.running()
                generating = [slot for slot in running if not slot.reading]
                reading = [slot for slot in running if slot.reading]

    def _decode(self, generating: list[Slot], reading: list[Slot]) -> bool:
        """Decode a step and sample; False when the pool had no room (nothing was read: run it again)."""
        batch = self._batch
        used = 0
        marks = [(slot, len(slot.tokens)) for slot in (*generating, *reading)]
        sampled: list[tuple[Slot, int]] = []
        for slot in generating:
            used = self._put(slot, 1, used, sampled)
        limit = min(used + PROMPT_TOKENS_BESIDE_STREAMS if used else BATCH_TOKENS, BATCH_TOKENS)
        shares = prompt_shares([len(slot.pending) for slot in reading], max(limit - used, 0))
        for slot, share in zip(reading, shares, strict=True):
            if share:
                count = self._reuse.chunk_length(len(slot.tokens), len(slot.pending), share)
                used = self._put(slot, count, used, sampled)
        if not used:
            return True
        batch.n_tokens = used
        status = llama_cpp.llama_decode(self._ctx, batch)
        if status == 1 and self.pool.tokens:  # no room in the pool: the batch's tokens are pending again
            for slot, kept in marks:
                slot.pending = slot.tokens[kept:] + slot.pending
                del slot.tokens[kept:]
                slot.reading = slot in reading
            return False
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
        return True

    def _put(self, slot: Slot, count: int, used: int, sampled: list[tuple[Slot, int]]) -> int:
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
        piece = self._pieces.get(token)
        if piece is None:
            length = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece, _PIECE_BUFFER, 0, False)
            piece = self._pieces[token] = self._piece.raw[: max(length, 0)]
        return piece

    def _tokens_of(self, name: str) -> tuple[frozenset[int], frozenset[int]]:
        """A dialect's tokens in this vocabulary (those that are one token here): the ones that end the model's turn
        beside its end-of-generation tokens, and the control tokens its syntax is written in."""
        found = self._dialect_tokens.get(name)
        if found is None:
            dialect = dialect_named(name)
            ends = frozenset(token for text in dialect.end_tokens if (token := self._single_token(text)) is not None)
            markup = (token for text in dialect.markup_tokens if (token := self._single_token(text)) is not None)
            found = self._dialect_tokens[name] = ends, frozenset(markup)
        return found

    def _single_token(self, text: str) -> int | None:
        tokens = self.tokenize(text)
        return tokens[0] if len(tokens) == 1 else None

    def _markup_bytes(self, token: int) -> bytes:
        """A control token's text (what _token_bytes leaves out of a control token): the dialect's markup."""
        length = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece, _PIECE_BUFFER, 0, True)
        return self._piece.raw[: max(length, 0)]

    def _advance(self, slot: Slot, token: int, logits: np.ndarray | None = None) -> None:
        request, decoder = slot.request, slot.decoder
        assert request is not None and decoder is not None
        if token in request.end_tokens or llama_cpp.llama_vocab_is_eog(self._vocab, token):
            self._finish(slot, "stop")
            return
        slot.produced += 1
        token_bytes = self._markup_bytes(token) if token in request.markup_tokens else self._token_bytes(token)
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

    def _finish(self, slot: Slot, reason: FinishReason) -> None:
        request, decoder = slot.request, slot.decoder
        assert request is not None and decoder is not None
        tail = decoder.decode(b"", final=True)
        if tail:
            request.emit(tail)
        self._release(slot)
        self._kv.keep(slot, len(request.prompt))
        if self._cache is not None and slot.tokens:
            size = self._kv.state_size(slot)
            if size <= SAVE_WHILE_RUNNING_BYTES or not self._busy():
                self._kv.save(slot, size)
            else:
                slot.unsaved = True
        request.emit(Finish(reason, len(request.prompt), slot.cached, slot.produced))

    def _release(self, slot: Slot) -> None:
        if slot.sampler is not None:
            llama_cpp.llama_sampler_free(slot.sampler)
        slot.request, slot.sampler, slot.decoder, slot.pending = None, None, None, []
        slot.top_logprobs, slot.reading = None, False

    def _fail_all(self, message: str) -> None:
        for slot in self._slots:
            if slot.request is not None:
                request = slot.request
                self._release(slot)
                self._kv.clear(slot)
                request.emit(GenerationFailed(message))
