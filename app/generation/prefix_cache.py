"""Saved KV states of token sequences, so a prompt that starts like an earlier one prefills only what is new.

Our own rather than llama-cpp-python's LlamaRAMCache: that one saves the whole context with a copy of the
logits buffer (n_batch x n_vocab floats, ~100 MB for a 49k vocabulary) that its byte count leaves out, and
matches only prompts that extend a key. Here an entry is one sequence's KV cells (llama_state_seq_*), its
bytes are what we count, and any entry sharing a prefix with the prompt serves: the engine drops the cells
past the shared part. Thread-safe: the engines of one process share one cache.

Every entry belongs to a scope (the tenant): a prompt only ever matches entries of its own scope, so one
tenant can never learn from a hit (cached_tokens, or a faster answer) what another tenant sent.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count

import numpy as np
import numpy.typing as npt

TokenArray = npt.NDArray[np.int32]


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


class PrefixCache:
    """LRU by bytes. A miss only costs a longer prefill; a hit restores exactly the KV the tokens produced."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
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

    def put(self, scope: str, tokens: Sequence[int] | TokenArray, data: bytes | bytearray) -> None:
        """Keep `data`, the KV state of exactly `tokens` for `scope`; evicts least recently used entries to fit."""
        entry = SavedState(scope, np.array(tokens, dtype=np.int32), data)
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
