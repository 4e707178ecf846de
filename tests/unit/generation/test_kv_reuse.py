"""KV reuse policy: the default keeps every cell; exact mode reuses and reads only whole fixed-position chunks."""

from __future__ import annotations

from app.generation.kv_reuse import KvReuse


def test_the_default_reuses_everything_held_but_the_last_prompt_token() -> None:
    reuse = KvReuse("all", batch_tokens=512)
    assert reuse.usable(shared=130, prompt_length=200) == 130
    # The whole prompt held: its last token is read again, its logits choose the first output token.
    assert reuse.usable(shared=200, prompt_length=200) == 199
    assert reuse.usable(shared=0, prompt_length=1) == 0
    # The answer's cells stay for the next turn.
    assert reuse.kept(cells=260, prompt_length=200) == 260


def test_the_default_fills_the_batch() -> None:
    reuse = KvReuse("all", batch_tokens=512)
    assert reuse.chunk_length(position=3, pending=1000, room=500) == 500
    assert reuse.chunk_length(position=3, pending=10, room=500) == 10


def test_exact_mode_reuses_only_whole_chunks_of_prompt_cells() -> None:
    reuse = KvReuse("exact", batch_tokens=512, chunk=64)
    assert reuse.usable(shared=130, prompt_length=200) == 128
    assert reuse.usable(shared=63, prompt_length=200) == 0
    # A 129-token prompt held whole: only 128 reused, its last chunk (one token) is read as a cold read does.
    assert reuse.usable(shared=129, prompt_length=129) == 128
    assert reuse.usable(shared=128, prompt_length=128) == 64
    # Generated tokens were decoded one at a time, unlike a cold read of the same text: their cells go.
    assert reuse.kept(cells=260, prompt_length=200) == 200


def test_exact_mode_reads_prompts_in_chunks_ending_on_fixed_positions() -> None:
    reuse = KvReuse("exact", batch_tokens=512, chunk=64)
    assert reuse.chunk_length(position=0, pending=200, room=512) == 64
    assert reuse.chunk_length(position=128, pending=72, room=512) == 64
    assert reuse.chunk_length(position=192, pending=8, room=512) == 8
    # Wherever reading starts, the next boundary ends the chunk.
    assert reuse.chunk_length(position=100, pending=500, room=512) == 28
