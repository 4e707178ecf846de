"""A sliding-window model's KV geometry and llama-server's rule for which cut of a sequence's cells may be reused."""

from __future__ import annotations

from app.generation.kv.context import ContextLayout
from app.generation.kv.window import KvGeometry, geometry_of, saved_window_start, swa_cells, window_holds

#: Gemma 3 270M's GGUF metadata, as llama.cpp reports it (the figures of issue 34).
GEMMA3_270M = {
    "general.architecture": "gemma3",
    "gemma3.block_count": "18",
    "gemma3.embedding_length": "640",
    "gemma3.attention.head_count": "4",
    "gemma3.attention.head_count_kv": "1",
    "gemma3.attention.key_length": "256",
    "gemma3.attention.value_length": "256",
    "gemma3.attention.sliding_window": "512",
}
SMOLLM2_135M = {
    "general.architecture": "llama",
    "llama.block_count": "30",
    "llama.embedding_length": "576",
    "llama.attention.head_count": "9",
    "llama.attention.head_count_kv": "3",
}


def test_head_sizes_come_from_the_key_and_value_lengths_not_embedding_over_heads() -> None:
    gemma = geometry_of(GEMMA3_270M, 512)
    assert (gemma.key_length, gemma.value_length) == (256, 256)  # 640 / 4 would say 160
    assert gemma.bytes_per_token == 18 * 1 * (256 + 256) * 2
    # Gemma 3 attends to the whole context in every sixth layer only.
    assert (gemma.layers, gemma.swa_layers, gemma.n_swa) == (18, 15, 512)
    smol = geometry_of(SMOLLM2_135M, 0)
    assert (smol.key_length, smol.swa_layers) == (64, 0)
    assert smol.bytes_per_token == 30 * 3 * 128 * 2


def test_a_pattern_in_the_metadata_wins_over_the_architecture_default() -> None:
    assert geometry_of({**GEMMA3_270M, "gemma3.attention.sliding_window_pattern": "2"}, 512).swa_layers == 9
    assert geometry_of({**GEMMA3_270M, "gemma3.attention.sliding_window_pattern": "1"}, 512).swa_layers == 0


def test_the_window_cache_is_sized_as_llama_cpp_sizes_it() -> None:
    # A window and a batch, padded to 256; one per sequence in split streams, one for all in a unified pool.
    assert swa_cells(512, 32_768, 512, 4, unified=False) == 1024
    assert swa_cells(512, 32_768, 512, 4, unified=True) == 2560
    assert swa_cells(512, 700, 512, 1, unified=False) == 700  # never more than the full-attention cache
    gemma = geometry_of(GEMMA3_270M, 512)
    per_layer = gemma.layer_bytes_per_token
    # Issue 34's case: 4 sequences of 32,768 cells. Window-sized: the 15 window layers hold 1,024 cells a sequence.
    windowed = ContextLayout(32_768, 4, 512, n_swa=512).cache_bytes(gemma)
    full = ContextLayout(32_768, 4, 512, n_swa=512, swa_full=True).cache_bytes(gemma)
    assert windowed == 4 * (3 * 32_768 + 15 * 1024) * per_layer
    assert full == 4 * 18 * 32_768 * per_layer
    assert full / windowed > 5
    # Exact reuse needs the whole window cache (cells where a cold read puts them).
    assert ContextLayout(32_768, 4, 512, kv_reuse="exact", n_swa=512).full_window
    assert not ContextLayout(32_768, 4, 512, kv_reuse="exact", swa_full=True).full_window  # no window: no cache


def test_a_cut_is_reusable_only_where_the_window_before_it_is_held() -> None:
    # llama-server's rule: the sequence's first held position no later than the cut minus the window.
    assert window_holds(512, 0, 812)
    assert window_holds(512, 300, 812)
    assert not window_holds(512, 327, 812)  # issue 34's restore: 812 of 839 tokens, the window cut at 327
    assert not window_holds(512, 1, 300)  # a cut within the window needs every cell before it
    assert window_holds(512, 0, 300)
    assert window_holds(0, 5_000, 10)  # no window: every cell is there


def test_a_saved_state_keeps_the_window_of_its_last_position() -> None:
    assert saved_window_start(512, 839) == 327
    assert saved_window_start(512, 400) == 0
    assert saved_window_start(0, 5_000) == 0
    start = saved_window_start(512, 839)
    assert not window_holds(512, start, 812)  # cutting a saved state short of its end loses the window


def test_geometry_of_a_model_without_metadata_is_empty_not_an_error() -> None:
    assert geometry_of({}, 0) == KvGeometry(0, 0, 0, 1, 0, 0)
