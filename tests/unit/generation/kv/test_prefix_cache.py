"""The prefix cache's bookkeeping: longest shared prefix wins, LRU eviction by bytes, superseded entries go."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.generation.kv.prefix_cache import PrefixCache, StateFiles, common_prefix_length


def test_common_prefix_length() -> None:
    assert common_prefix_length(np.array([1, 2, 3]), np.array([1, 2, 4])) == 2
    assert common_prefix_length(np.array([1, 2]), np.array([1, 2, 3])) == 2
    assert common_prefix_length(np.array([5]), np.array([1])) == 0


def test_the_entry_sharing_the_longest_prefix_is_chosen_even_when_it_diverges_later() -> None:
    cache = PrefixCache(capacity_bytes=1000)
    cache.put("t", [1, 2, 3, 4], b"a")
    cache.put("t", [1, 2, 9, 9, 9], b"b")
    assert cache.best_match("t", [7, 8]) is None
    match = cache.best_match("t", [1, 2, 3, 4, 5, 6])
    assert match is not None and match[0] == 4 and match[1].data == b"a"
    # Diverging after 3 shared tokens still serves those 3.
    match = cache.best_match("t", [1, 2, 9, 8])
    assert match is not None and match[0] == 3 and match[1].data == b"b"


def test_least_recently_used_entries_go_first_and_the_size_stays_bounded() -> None:
    cache = PrefixCache(capacity_bytes=10)
    cache.put("t", [1], b"xxxx")
    cache.put("t", [2], b"yyyy")
    assert cache.best_match("t", [1]) is not None  # [1] is now the most recently used
    cache.put("t", [3], b"zzzz")
    assert cache.size_bytes == 8 and len(cache) == 2
    assert cache.best_match("t", [2]) is None
    assert cache.best_match("t", [1]) is not None and cache.best_match("t", [3]) is not None
    cache.put("t", [4], b"w" * 11)  # larger than the whole cache: not kept, nothing evicted for it
    assert len(cache) == 2


def test_an_entry_that_a_longer_one_extends_is_dropped() -> None:
    cache = PrefixCache(capacity_bytes=100)
    cache.put("t", [1, 2], b"turn one")
    cache.put("t", [1, 2, 3, 4], b"turn two")
    assert len(cache) == 1 and cache.size_bytes == len(b"turn two")
    cache.put("t", [1, 5], b"branch")
    assert len(cache) == 2


def test_an_entry_serves_only_its_own_scope() -> None:
    cache = PrefixCache(capacity_bytes=100)
    cache.put("tenant-a", [1, 2, 3], b"a's prompt")
    assert cache.best_match("tenant-b", [1, 2, 3, 4]) is None
    # Another scope's longer entry neither serves nor supersedes it.
    cache.put("tenant-b", [1, 2, 3, 4], b"b's prompt")
    assert len(cache) == 2
    match = cache.best_match("tenant-a", [1, 2, 3, 4])
    assert match is not None and match[0] == 3 and match[1].data == b"a's prompt"


def test_states_asked_to_persist_are_found_in_their_files_once_memory_lost_them(tmp_path: Path) -> None:
    files = StateFiles(tmp_path / "model", capacity_bytes=10_000)
    cache = PrefixCache(capacity_bytes=10, files=files)
    cache.put("t", [1, 2, 3], bytearray(b"kept"), persist=True)
    cache.put("t", [7, 8], bytearray(b"gone"))
    files.flush()
    assert len(files) == 1  # only the persisted one has a file
    cache.put("t", [9], bytearray(b"x" * 10))  # memory is full: both earlier entries are evicted from it
    match = cache.best_match("t", [1, 2, 3, 4])
    assert match is not None and match[0] == 3 and bytes(match[1].data) == b"kept"
    assert cache.best_match("t", [7, 8]) is None
    assert cache.best_match("u", [1, 2, 3]) is None  # another scope never reads it
    files.close()


def test_state_files_outlive_the_process_and_stay_within_their_bytes(tmp_path: Path) -> None:
    files = StateFiles(tmp_path, capacity_bytes=200)
    for first in range(3):
        files.put("t", np.array([first, 1, 2], dtype=np.int32), bytearray(b"s" * 60))
    files.flush()
    # Each file holds its header and tokens too: 200 bytes keep two of the three, the least recently used went.
    assert len(files) == 2 and files.size_bytes <= 200
    assert files.best_match("t", np.array([0, 1, 2], dtype=np.int32)) is None
    files.close()
    again = StateFiles(tmp_path, capacity_bytes=200)
    assert len(again) == 2
    found = again.best_match("t", np.array([2, 1, 2, 5], dtype=np.int32))
    assert found is not None and found[0] == 3
    state = again.read(found[1])
    assert state is not None and bytes(state.data) == b"s" * 60 and state.tokens.tolist() == [2, 1, 2]
    again.close()


def test_a_damaged_or_vanished_file_is_a_miss(tmp_path: Path) -> None:
    (tmp_path / "junk.kvstate").write_bytes(b"not a state")
    files = StateFiles(tmp_path, capacity_bytes=10_000)
    assert len(files) == 0
    files.put("t", np.array([1, 2], dtype=np.int32), bytearray(b"abc"))
    files.flush()
    found = files.best_match("t", np.array([1, 2], dtype=np.int32))
    assert found is not None
    found[1].unlink()
    assert files.read(found[1]) is None
    assert len(files) == 0
    files.close()
