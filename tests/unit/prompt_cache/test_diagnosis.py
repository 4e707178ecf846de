"""prompt_cache_diagnostics from two fingerprints and the engine's reuse: the reason is the first difference, the
hit or miss and the tokens missed are the engine's."""

from __future__ import annotations

from typing import Any

import pytest

from app.generation.kv.reuse import KvReuse
from app.prompt_cache.diagnosis import (
    BLOCK_TOKENS,
    Compared,
    Comparison,
    Fingerprint,
    compare,
    comparison_with,
    diagnose,
    fingerprint_of,
    job_diagnostics,
)

BASE: dict[str, Any] = {
    "model": "smollm2",
    "prompt_cache_key": "k",
    "tools": [],
    "text_format": {"type": "text"},
    "reasoning_effort": None,
    "verbosity": "medium",
    "service_tier": None,
}
PROMPT = list(range(100, 300))  # 200 tokens
ALL = KvReuse("all")


def fingerprint(prompt: list[int] = PROMPT, compactions: int = 0, **changes: Any) -> Fingerprint:
    return fingerprint_of({**BASE, **changes}, prompt, compactions)


def test_a_prompt_that_extends_the_compared_one_is_a_hit_when_the_engine_reused_it() -> None:
    longer = [*PROMPT, 1, 2, 3]
    comparison = compare(fingerprint(), fingerprint(longer), longer, ALL)
    assert (comparison.extends, comparison.reason, comparison.shared) == (True, None, len(PROMPT))
    assert diagnose(comparison, len(longer), len(PROMPT)) == {"type": "cache_hit"}


def test_the_same_prompt_again_is_a_hit_with_all_but_its_last_token_reused() -> None:
    comparison = compare(fingerprint(), fingerprint(), PROMPT, ALL)
    # The engine never reuses a prompt's last token (its logits choose the first output token).
    assert comparison.expected == len(PROMPT) - 1
    assert diagnose(comparison, len(PROMPT), len(PROMPT) - 1) == {"type": "cache_hit"}


def test_in_exact_mode_a_hit_needs_only_the_whole_chunks() -> None:
    comparison = compare(fingerprint(), fingerprint(), PROMPT, KvReuse("exact"))
    assert comparison.expected == 192
    assert diagnose(comparison, len(PROMPT), 192) == {"type": "cache_hit"}


def test_agreeing_prompts_the_engine_did_not_reuse_are_unavailable_not_a_guessed_reason() -> None:
    comparison = compare(fingerprint(), fingerprint(), PROMPT, ALL)
    assert diagnose(comparison, len(PROMPT), 0) == {"type": "unavailable"}


def test_a_changed_input_is_a_miss_with_the_tokens_the_engine_read_anew() -> None:
    changed = [*PROMPT[:70], 5, *PROMPT[71:]]
    comparison = compare(fingerprint(), fingerprint(changed), changed, ALL)
    assert (comparison.extends, comparison.reason) == (False, "input_changed")
    # Shared to a whole block: the first 64 tokens (two blocks of 32).
    assert comparison.shared == 2 * BLOCK_TOKENS
    assert diagnose(comparison, len(changed), 70) == {
        "type": "cache_miss",
        "reason": "input_changed",
        "cache_missed_tokens": len(changed) - 70,
        "comparison_reusable_tokens": 64,
    }


def test_a_shorter_prompt_is_a_changed_input() -> None:
    shorter = PROMPT[:150]
    comparison = compare(fingerprint(), fingerprint(shorter), shorter, ALL)
    assert (comparison.extends, comparison.reason, comparison.shared) == (False, "input_changed", 128)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"model": "other"}, "model_changed"),
        ({"prompt_cache_key": "other"}, "prompt_cache_key_changed"),
        ({"tools": [{"type": "function", "name": "f"}]}, "tools_changed"),
        ({"text_format": {"type": "json_object"}}, "text_format_changed"),
        ({"reasoning_effort": "high"}, "reasoning_effort_changed"),
        ({"verbosity": "low"}, "verbosity_changed"),
        ({"service_tier": "flex"}, "service_tier_changed"),
    ],
)
def test_a_changed_setting_is_the_reason_of_a_miss(changes: dict[str, Any], reason: str) -> None:
    changed = [7, *PROMPT]
    comparison = compare(fingerprint(), fingerprint(changed, **changes), changed, ALL)
    assert diagnose(comparison, len(changed), 0)["reason"] == reason


def test_the_first_changed_setting_in_the_sdks_order_is_the_reason() -> None:
    changed = [7, *PROMPT]
    current = fingerprint(changed, verbosity="low", tools=[{"type": "function", "name": "f"}], model="other")
    assert compare(fingerprint(), current, changed, ALL).reason == "model_changed"


def test_a_compaction_since_the_compared_response_comes_after_the_settings() -> None:
    changed = [7, *PROMPT]
    assert compare(fingerprint(), fingerprint(changed, compactions=1), changed, ALL).reason == "context_compacted"
    current = fingerprint(changed, compactions=1, reasoning_effort="low")
    assert compare(fingerprint(), current, changed, ALL).reason == "reasoning_effort_changed"


def test_a_changed_setting_that_left_the_prompt_whole_is_still_a_hit_when_the_engine_reused_it() -> None:
    comparison = compare(fingerprint(), fingerprint(prompt_cache_key="other"), PROMPT, ALL)
    assert comparison.reason == "prompt_cache_key_changed"
    assert diagnose(comparison, len(PROMPT), len(PROMPT) - 1) == {"type": "cache_hit"}


def test_no_usage_is_unavailable() -> None:
    comparison = compare(fingerprint(), fingerprint(), PROMPT, ALL)
    assert diagnose(comparison, None, 0) == {"type": "unavailable"}


def test_a_missing_comparison_response_and_one_without_a_fingerprint() -> None:
    current = fingerprint()
    missing = comparison_with(Compared(False), current, PROMPT, ALL)
    assert diagnose(missing, len(PROMPT), 0) == {"type": "comparison_response_not_found"}
    bare = comparison_with(Compared(True, None), current, PROMPT, ALL)
    assert diagnose(bare, len(PROMPT), len(PROMPT) - 1) == {"type": "unavailable"}


def test_fingerprints_and_comparisons_travel_as_json() -> None:
    original = fingerprint()
    assert Fingerprint.from_payload(original.to_payload()) == original
    assert len(original.blocks) == len(PROMPT) // BLOCK_TOKENS
    comparison = compare(original, original, PROMPT, ALL)
    assert Comparison.from_payload(comparison.to_payload()) == comparison


def test_a_job_names_its_diagnostics_only_when_its_request_named_a_comparison() -> None:
    assert job_diagnostics(None, (10, 9)) is None
    payload = compare(fingerprint(), fingerprint(), PROMPT, ALL).to_payload()
    assert job_diagnostics(payload, (len(PROMPT), len(PROMPT) - 1)) == {"type": "cache_hit"}
    assert job_diagnostics(payload, None) == {"type": "unavailable"}
