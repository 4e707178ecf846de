"""KV reuse policy: the default keeps every cell; exact mode reuses and reads only whole fixed-position chunks."""

from __future__ import annotations

from app.generation.kv.reuse import KvReuse, prompt_shares


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


def test_a_short_prompt_beside_a_long_one_is_read_in_the_same_step_and_that_step_is_kept_short() -> None:
    # The long prompt came first (slot order); the short one still reads all it needs, and since its first token
    # comes from this step, the long one reads only its floor in it (issue 27: the short one's first token waits
    # for its own prefill, not a full chunk of another prompt).
    assert prompt_shares([7000, 20], room=512, floor=32) == [32, 20]
    assert prompt_shares([20, 7000], room=512, floor=32) == [20, 32]
    # Longer than a floor: it takes what it needs of the room, shortest first, and the step stops there.
    assert prompt_shares([7000, 100], room=512, floor=32) == [32, 100]
    # A prompt alone reads the whole room, its last chunk too.
    assert prompt_shares([7000], room=512, floor=32) == [512]
    assert prompt_shares([300], room=512, floor=32) == [300]


def test_the_room_goes_to_the_fewest_pending_tokens_after_each_gets_its_floor() -> None:
    # Beside streams (128 tokens of room): the long prompt keeps its floor, the shorter ones the rest, shortest first.
    assert prompt_shares([7000, 300], room=128, floor=32) == [32, 96]
    assert prompt_shares([7000, 300, 400], room=128, floor=32) == [32, 64, 32]
    # One of them reads the last of its prompt: the others read only their floor.
    assert prompt_shares([7000, 300, 50], room=128, floor=32) == [32, 32, 50]
    assert prompt_shares([7000, 300, 20], room=128, floor=32) == [32, 32, 20]
    # Room for less than every floor: the floors in slot order until it runs out.
    assert prompt_shares([7000, 300, 50], room=40, floor=32) == [32, 8, 0]
    # Never more than a sequence has pending, never more than the room.
    assert prompt_shares([5, 3], room=512, floor=32) == [5, 3]
    assert prompt_shares([], room=512) == []
    assert prompt_shares([900, 900], room=0) == [0, 0]


def test_shares_fill_the_room_unless_a_prompt_ends_and_never_exceed_it() -> None:
    for pending in ([1, 2, 3, 4], [600, 700, 10], [512], [100, 100, 100, 100, 100], [900, 40, 700]):
        for room in (0, 1, 31, 128, 512):
            shares = prompt_shares(pending, room)
            assert all(0 <= share <= count for share, count in zip(shares, pending, strict=True))
            ended = [share == count for share, count in zip(shares, pending, strict=True)]
            assert sum(shares) <= room
            if not any(ended):
                assert sum(shares) == room
            else:  # the one that ended is the only one past its floor
                assert sum(share > 32 for share, done in zip(shares, ended, strict=True) if not done) == 0
