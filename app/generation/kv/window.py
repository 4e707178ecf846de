"""A model's KV geometry: how many bytes a token's cells take in its full-attention and its sliding-window layers,
how large the context's cache is, and which cut of a sequence's cells a sliding-window model may reuse.

Sliding-window attention (Gemma 2/3, Cohere2, ...): most layers attend only to the last `n_swa` positions. llama.cpp
keeps those layers' cells in a cache of their own, sized to the window (`swa_full` off: n_swa + a batch, padded to
256, a sequence) or to the whole context (`swa_full` on); in a window-sized cache it writes over the cells that
fell out of the window, and when it saves a sequence (llama_state_seq_get_data) it leaves them out whatever the
size. So a sequence's window layers hold positions from `seq_pos_min` on, and reading on from position `n` (the
cells past `n` dropped) needs the window before `n`: llama-server's rule, followed here, is
`seq_pos_min <= max(0, n - n_swa)`, else the prompt is read again from the start.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass

import llama_cpp

from app.observability.metrics import MODEL_MEMORY_BYTES

logger = logging.getLogger(__name__)

#: llama.cpp pads a window-sized cache to this many cells.
_SWA_PAD = 256
#: Every n-th layer attends to the whole context, the others to the window, where the GGUF does not say
#: (`<arch>.attention.sliding_window_pattern`): llama.cpp's defaults for these architectures.
DEFAULT_SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4}


def window_holds(n_swa: int, pos_min: int, reused: int) -> bool:
    """Whether a sequence whose window layers hold positions from `pos_min` on may be read on from `reused` (its
    cells past that dropped): the cells the next position attends to are all there. Always, without a window."""
    if n_swa <= 0 or reused <= 0 or pos_min < 0:
        return True
    return pos_min <= max(0, reused - n_swa)


def saved_window_start(n_swa: int, cells: int) -> int:
    """The first position whose window-layer cells a saved state of `cells` tokens holds (llama.cpp leaves out
    those the sequence's last position no longer attends to)."""
    return max(0, cells - n_swa) if n_swa > 0 else 0


def swa_cells(n_swa: int, cells: int, batch_tokens: int, sequences: int, *, unified: bool) -> int:
    """Cells of a window-sized cache (llama.cpp's sizing): the window of every sequence sharing it, plus a batch,
    padded, and never more than the full-attention cache (`cells`, one stream's)."""
    wanted = n_swa * (sequences if unified else 1) + batch_tokens
    return min(cells, -(-wanted // _SWA_PAD) * _SWA_PAD)


@dataclass(frozen=True, slots=True)
class KvGeometry:
    """What one token's KV cells take, from the model's real head sizes (key and value lengths may differ from
    embedding / heads: Gemma 3 270M's heads are 256 wide, its embedding / heads 160)."""

    layers: int
    #: Layers attending only to the last `n_swa` positions (0: none).
    swa_layers: int
    n_swa: int
    kv_heads: int
    key_length: int
    value_length: int
    #: Bytes of one stored element (f16 cells: 2).
    element_bytes: int = 2

    @property
    def layer_bytes_per_token(self) -> int:
        return self.kv_heads * (self.key_length + self.value_length) * self.element_bytes

    @property
    def bytes_per_token(self) -> int:
        """One token's cells in every layer (what a token costs in a full-size cache, or in a saved state within
        the window)."""
        return self.layers * self.layer_bytes_per_token

    def cache_bytes(self, cells: int, streams: int, batch_tokens: int, sequences: int, *, swa_full: bool) -> int:
        """The context's KV cache: `streams` streams of `cells` cells in the full-attention layers, and of the
        window (or as many, `swa_full`) in the window layers."""
        window = cells
        if self.swa_layers and self.n_swa > 0 and not swa_full:
            window = swa_cells(self.n_swa, cells, batch_tokens, sequences, unified=streams == 1)
        dense = (self.layers - self.swa_layers) * cells
        return streams * (dense + self.swa_layers * window) * self.layer_bytes_per_token


def geometry_of(metadata: dict[str, str], n_swa: int) -> KvGeometry:
    """A model's KV geometry from its GGUF metadata (`n_swa`: llama.cpp's llama_model_n_swa, 0 without a window)."""
    arch = metadata.get("general.architecture", "llama")

    def number(key: str, default: int = 0) -> int:
        value = metadata.get(f"{arch}.{key}")
        try:
            return int(value) if value is not None else default
        except ValueError:  # an array (a per-layer value): not a single figure
            return default

    layers = number("block_count")
    heads = max(number("attention.head_count", 1), 1)
    kv_heads = number("attention.head_count_kv", heads) or heads
    head = number("embedding_length") // heads
    key_length = number("attention.key_length", head)
    value_length = number("attention.value_length", key_length)
    swa_layers = 0
    if n_swa > 0:
        pattern = number("attention.sliding_window_pattern", DEFAULT_SWA_PATTERNS.get(arch, 0))
        # Layer i attends to the window unless i % pattern is pattern - 1 (llama.cpp's set_swa_pattern; 0: every
        # layer does, 1: none).
        swa_layers = layers if pattern <= 0 else layers - layers // pattern
    return KvGeometry(layers, swa_layers, n_swa, kv_heads, key_length, value_length)


def model_metadata(model: llama_cpp.llama_model_p) -> dict[str, str]:
    """A loaded model's GGUF metadata as text (arrays are left out by llama.cpp)."""
    buffer = ctypes.create_string_buffer(256)
    metadata: dict[str, str] = {}
    for index in range(llama_cpp.llama_model_meta_count(model)):
        if llama_cpp.llama_model_meta_key_by_index(model, index, buffer, len(buffer)) < 0:
            continue
        key = buffer.value.decode("utf-8", "replace")
        if llama_cpp.llama_model_meta_val_str_by_index(model, index, buffer, len(buffer)) >= 0:
            metadata[key] = buffer.value.decode("utf-8", "replace")
    return metadata


def report_load(model: str, geometry: KvGeometry, kv_bytes: int, model_bytes: int, swa_full: bool) -> None:
    """What a model's load reports: its weights' and its KV cache's sizes, and its window, in a log line and as
    gauges (`llama_responses_model_memory_bytes`)."""
    window = ""
    if geometry.n_swa:
        cache = "full-size" if swa_full else "window-sized"
        window = f", window {geometry.n_swa} in {geometry.swa_layers} of {geometry.layers} layers, {cache} cache"
    logger.info(
        "model %s: weights %.0f MiB, KV cache %.0f MiB (%d bytes a token%s)",
        model,
        model_bytes / 2**20,
        kv_bytes / 2**20,
        geometry.bytes_per_token,
        window,
    )
    MODEL_MEMORY_BYTES.labels(model, "weights").set(model_bytes)
    MODEL_MEMORY_BYTES.labels(model, "kv_cache").set(kv_bytes)


def report_unload(model: str) -> None:
    MODEL_MEMORY_BYTES.labels(model, "weights").set(0)
    MODEL_MEMORY_BYTES.labels(model, "kv_cache").set(0)
