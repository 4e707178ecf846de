"""Saved KV states of token sequences, so a prompt that starts like an earlier one prefills only what is new.

Our own rather than llama-cpp-python's LlamaRAMCache: that one saves the whole context with a copy of the
logits buffer (n_batch x n_vocab floats, ~100 MB for a 49k vocabulary) that its byte count leaves out, and
matches only prompts that extend a key. Here an entry is one sequence's KV cells (llama_state_seq_*), its
bytes are what we count, and any entry sharing a prefix with the prompt serves: the engine drops the cells
past the shared part. Thread-safe: the engines of one process share one cache.

Every entry belongs to a scope (the tenant): a prompt only ever matches entries of its own scope, so one
tenant can never learn from a hit (cached_tokens, or a faster answer) what another tenant sent.

StateFiles keeps some states on disk as well (those of requests with `prompt_cache_options.ttl: "12h"`): one file a
state in a directory per model (RESPONSES_PREFIX_CACHE_DIR), LRU by bytes (RESPONSES_PREFIX_CACHE_DIR_MB), found
again after a restart. The memory cache looks there when it holds no longer match itself.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

TokenArray = npt.NDArray[np.int32]

logger = logging.getLogger(__name__)

#: A state file: this, the scope's length and UTF-8 bytes, the token count and int32 tokens, then the state.
_MAGIC = b"LRKVSTATE1\n"
_SUFFIX = ".kvstate"


def common_prefix_length(left: TokenArray, right: TokenArray) -> int:
    shortest = min(len(left), len(right))
    differs = np.flatnonzero(left[:shortest] != right[:shortest])
    return int(differs[0]) if differs.size else shortest


@dataclass(frozen=True, slots=True)
class SavedState:
    scope: str
    tokens: TokenArray
    #: The engine hands over a bytearray, so that a restore reads it without a copy; never modified.
    data: bytes | bytearray


@dataclass(frozen=True, slots=True)
class _StateFile:
    scope: str
    tokens: TokenArray
    size: int


class StateFiles:
    """Saved states as files in one directory (one model's), LRU by bytes. Written on a thread of their own (a
    state can be hundreds of MB); read on a hit. Files that vanish or do not parse are misses, never errors."""

    def __init__(self, directory: Path, capacity_bytes: int) -> None:
        self.directory = directory
        self.capacity_bytes = capacity_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._entries: OrderedDict[Path, _StateFile] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kv-state-files")
        self._last_write: Future[None] | None = None
        self._ids = count()
        self._load()

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def _load(self) -> None:
        """The files already there (an earlier run's), least recently used first."""
        found: list[tuple[float, Path, _StateFile]] = []
        for path in self.directory.glob(f"*{_SUFFIX}"):
            try:
                with path.open("rb") as file:
                    scope, tokens = _read_head(file)
                stat = path.stat()
            except (OSError, ValueError):
                logger.warning("ignoring the unreadable KV state file %s", path)
                continue
            found.append((stat.st_mtime, path, _StateFile(scope, tokens, stat.st_size)))
        for _, path, entry in sorted(found, key=lambda item: item[0]):
            self._entries[path] = entry
            self._size += entry.size
        with self._lock:
            self._evict()

    def best_match(self, scope: str, wanted: TokenArray) -> tuple[int, Path] | None:
        with self._lock:
            best: tuple[int, Path] | None = None
            for path, entry in self._entries.items():
                if entry.scope != scope:
                    continue
                shared = common_prefix_length(entry.tokens, wanted)
                if shared and (best is None or shared > best[0]):
                    best = (shared, path)
            return best

    def read(self, path: Path) -> SavedState | None:
        """The state a file holds (and it becomes the most recently used); None when it is gone or damaged."""
        try:
            with path.open("rb") as file:
                scope, tokens = _read_head(file)
                data = bytearray(file.read())
            os.utime(path)
        except (OSError, ValueError):
            with self._lock:
                self._forget(path)
            return None
        with self._lock:
            if path in self._entries:
                self._entries.move_to_end(path)
        return SavedState(scope, tokens, data)

    def put(self, scope: str, tokens: TokenArray, data: bytes | bytearray) -> None:
        """Write the state on the writer thread (`data` must not change meanwhile: the engine's never does)."""
        if not len(tokens) or len(data) > self.capacity_bytes:
            return
        self._last_write = self._writer.submit(self._write, scope, tokens, data)

    def flush(self) -> None:
        """Wait for the writes handed over so far (tests, shutdown)."""
        if self._last_write is not None:
            self._last_write.result()

    def close(self) -> None:
        self._writer.shutdown(wait=True)

    def _write(self, scope: str, tokens: TokenArray, data: bytes | bytearray) -> None:
        path = self.directory / f"{os.getpid()}-{next(self._ids)}-{os.urandom(4).hex()}{_SUFFIX}"
        scope_bytes = scope.encode("utf-8", "surrogatepass")
        temporary = path.with_suffix(".tmp")
        try:
            with temporary.open("wb") as file:
                file.write(_MAGIC + struct.pack("<I", len(scope_bytes)) + scope_bytes)
                file.write(struct.pack("<I", len(tokens)) + np.asarray(tokens, dtype="<i4").tobytes())
                file.write(data)
            os.replace(temporary, path)
            size = path.stat().st_size
        except OSError as error:
            logger.warning("could not write a KV state file: %s", error)
            temporary.unlink(missing_ok=True)
            return
        with self._lock:
            # A file of the same scope whose tokens begin the new one can never match longer than it: drop it.
            for old, entry in list(self._entries.items()):
                if entry.scope == scope and PrefixCache._begins(entry.tokens, tokens):
                    self._forget(old)
            self._entries[path] = _StateFile(scope, np.array(tokens, dtype=np.int32), size)
            self._size += size
            self._evict()

    def _evict(self) -> None:
        while self._size > self.capacity_bytes and self._entries:
            self._forget(next(iter(self._entries)))

    def _forget(self, path: Path) -> None:
        entry = self._entries.pop(path, None)
        if entry is not None:
            self._size -= entry.size
        path.unlink(missing_ok=True)


def _read_head(file: BinaryIO) -> tuple[str, TokenArray]:
    if file.read(len(_MAGIC)) != _MAGIC:
        raise ValueError("not a KV state file")
    (scope_length,) = struct.unpack("<I", file.read(4))
    scope = file.read(scope_length).decode("utf-8", "surrogatepass")
    (token_count,) = struct.unpack("<I", file.read(4))
    raw = file.read(token_count * 4)
    if len(raw) != token_count * 4:
        raise ValueError("a truncated KV state file")
    return scope, np.frombuffer(raw, dtype="<i4").astype(np.int32)


class PrefixCache:
    """LRU by bytes. A miss only costs a longer prefill; a hit restores exactly the KV the tokens produced.
    `files`: where states asked to outlive memory (put's `persist`) are kept too."""

    def __init__(self, capacity_bytes: int, files: StateFiles | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        self.files = files
        self._entries: OrderedDict[int, SavedState] = OrderedDict()
        self._ids = count()
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def best_match(self, scope: str, tokens: Sequence[int] | TokenArray) -> tuple[int, SavedState] | None:
        """The entry of `scope` sharing the longest prefix with `tokens`, and that length; None when none shares
        any."""
        wanted = np.asarray(tokens, dtype=np.int32)
        found = self._best_in_memory(scope, wanted)
        on_disk = self.files.best_match(scope, wanted) if self.files is not None else None
        if on_disk is None or (found is not None and found[0] >= on_disk[0]):
            return found
        state = self.files.read(on_disk[1]) if self.files is not None else None
        if state is None:
            return found
        self.put(scope, state.tokens, state.data)  # in memory too: the next hit needs no read
        return on_disk[0], state

    def _best_in_memory(self, scope: str, wanted: TokenArray) -> tuple[int, SavedState] | None:
        with self._lock:
            best: tuple[int, int] | None = None
            for key, entry in self._entries.items():
                if entry.scope != scope:
                    continue
                shared = common_prefix_length(entry.tokens, wanted)
                if shared and (best is None or shared > best[0]):
                    best = (shared, key)
            if best is None:
                return None
            self._entries.move_to_end(best[1])
            return best[0], self._entries[best[1]]

    def put(
        self, scope: str, tokens: Sequence[int] | TokenArray, data: bytes | bytearray, *, persist: bool = False
    ) -> None:
        """Keep `data`, the KV state of exactly `tokens` for `scope`; evicts least recently used entries to fit.
        `persist`: written to the state files as well (when there are any)."""
        entry = SavedState(scope, np.array(tokens, dtype=np.int32), data)
        if persist and self.files is not None:
            self.files.put(scope, entry.tokens, data)
        if not len(entry.tokens) or len(data) > self.capacity_bytes:
            return
        with self._lock:
            # An entry of the same scope whose tokens begin the new one can never match longer than it: drop it.
            for key, old in list(self._entries.items()):
                if old.scope == scope and self._begins(old.tokens, entry.tokens):
                    self._drop(key)
            self._entries[next(self._ids)] = entry
            self._size += len(data)
            while self._size > self.capacity_bytes:
                self._drop(next(iter(self._entries)))

    @staticmethod
    def _begins(head: TokenArray, tokens: TokenArray) -> bool:
        return len(head) <= len(tokens) and common_prefix_length(head, tokens) == len(head)

    def _drop(self, key: int) -> None:
        self._size -= len(self._entries.pop(key).data)
