"""`prompt_cache_diagnostics`: whether a response reused the prompt prefix of the response it names in
`prompt_cache_options.comparison_response_id`, and if not, why.

Every stored response keeps a Fingerprint (its `responses.prompt_cache_fingerprint` column): a short hash of each
setting that shapes its prompt or its cache, how many compactions its context held, its prompt token count and
hashes of its prompt's leading tokens (a running hash every BLOCK_TOKENS tokens, and one of the whole prompt).
From the two fingerprints the API node learns, before the job runs, whether the new prompt extends the whole
compared prompt, and otherwise what differs first (compare()). The hit or miss itself is the engine's: after
the job, its reused tokens (`usage.input_tokens_details.cached_tokens`) say whether the compared prefix was
reused (diagnose()). Nothing is guessed:

- `cache_hit`: the new prompt extends the compared one, and the engine reused that whole prefix (a setting may
  have changed meanwhile: the cache here is keyed by the tokens and the tenant, so it still serves).
- `cache_miss`: the prompts diverge. `reason` is the first difference, in the SDK's order of reasons: a setting
  (model, prompt_cache_key, tools, text format, reasoning effort, verbosity, service tier), then a compaction
  since, else the input itself. `cache_missed_tokens`: the prompt tokens the engine read anew
  (`input_tokens - cached_tokens`); `comparison_reusable_tokens`: the compared prompt's tokens the new one
  shares (to a block of BLOCK_TOKENS).
- `unavailable`: the prompts agree but the engine did not reuse the prefix (its state was evicted, or was read
  on another worker, or `mode: "explicit"` read none), or the response ended with no usage (failed,
  cancelled in the queue), or the compared response has no fingerprint.
- `comparison_response_not_found`: no response of this tenant has that id (or it was not stored).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from app.generation.kv.reuse import KvReuse

#: Granularity of the prompt hashes a fingerprint keeps: 8 bytes of hash per this many tokens.
BLOCK_TOKENS = 32
_DIGEST_BYTES = 8

#: The settings a fingerprint hashes, in the order their change is reported (the SDK's order of reasons).
SETTINGS = ("model", "prompt_cache_key", "tools", "text_format", "reasoning_effort", "verbosity", "service_tier")
REASONS: dict[str, str] = {name: f"{name}_changed" for name in SETTINGS}

Outcome = Literal["compared", "comparison_response_not_found", "unavailable"]


def setting_hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_DIGEST_BYTES).hexdigest()


def _token_bytes(tokens: Sequence[int]) -> bytes:
    return np.asarray(tokens, dtype="<i4").tobytes()


def _prefix_digest(data: bytes, tokens: int) -> str:
    return hashlib.blake2b(data[: tokens * 4], digest_size=_DIGEST_BYTES).hexdigest()


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What a later response compares against (kept as JSON on its row)."""

    #: Setting name (SETTINGS) -> setting_hash of its value.
    settings: dict[str, str]
    #: Compaction items its context held (history and input), an automatic compaction's included.
    compactions: int
    #: Its prompt's length in tokens, the running hash after each BLOCK_TOKENS of them, and the whole prompt's.
    tokens: int
    blocks: list[str] = field(default_factory=list)
    whole: str = ""

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Fingerprint:
        return cls(
            settings={str(key): str(value) for key, value in payload["settings"].items()},
            compactions=int(payload["compactions"]),
            tokens=int(payload["tokens"]),
            blocks=[str(block) for block in payload["blocks"]],
            whole=str(payload["whole"]),
        )


def fingerprint_of(settings: dict[str, Any], prompt: Sequence[int], compactions: int) -> Fingerprint:
    """`settings`: each name of SETTINGS and its value for this request."""
    data = _token_bytes(prompt)
    running = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    blocks: list[str] = []
    step = BLOCK_TOKENS * 4
    for start in range(0, len(data) - step + 1, step):
        running.update(data[start : start + step])
        blocks.append(running.hexdigest())
    return Fingerprint(
        settings={name: setting_hash(settings.get(name)) for name in SETTINGS},
        compactions=compactions,
        tokens=len(prompt),
        blocks=blocks,
        whole=_prefix_digest(data, len(prompt)),
    )


@dataclass(frozen=True, slots=True)
class Comparison:
    """What the API node learnt by comparing the two fingerprints; the job carries it to its end (diagnose)."""

    outcome: Outcome
    #: The new prompt begins with the whole compared prompt.
    extends: bool = False
    #: The first difference (an SDK reason), None when there is none.
    reason: str | None = None
    #: Leading tokens the two prompts share (the compared prompt's length when `extends`, else to a block).
    shared: int = 0
    #: Tokens the engine must report reused for a hit: what it can reuse of `shared` (kv.reuse.usable).
    expected: int = 0

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Comparison:
        return cls(**payload)


def _shared_blocks(previous: Fingerprint, current: Fingerprint) -> int:
    count = 0
    for old, new in zip(previous.blocks, current.blocks, strict=False):
        if old != new:
            break
        count += 1
    return count * BLOCK_TOKENS


def compare(previous: Fingerprint | None, current: Fingerprint, prompt: Sequence[int], reuse: KvReuse) -> Comparison:
    """The compared response's fingerprint (None: it has none) against this request's."""
    if previous is None:
        return Comparison("unavailable")
    extends = previous.tokens <= len(prompt) and _prefix_digest(_token_bytes(prompt), previous.tokens) == previous.whole
    shared = previous.tokens if extends else min(_shared_blocks(previous, current), previous.tokens)
    reason = next((REASONS[name] for name in SETTINGS if previous.settings.get(name) != current.settings[name]), None)
    if reason is None and current.compactions > previous.compactions:
        reason = "context_compacted"
    if reason is None and not extends:
        reason = "input_changed"
    expected = reuse.usable(shared, len(prompt)) if extends else 0
    return Comparison("compared", extends=extends, reason=reason, shared=shared, expected=expected)


def diagnose(comparison: Comparison, input_tokens: int | None, cached_tokens: int) -> dict[str, Any]:
    """The Response's `prompt_cache_diagnostics`, from the comparison and what the engine reused
    (`input_tokens` None: the response read no prompt, it has no usage)."""
    if comparison.outcome != "compared":
        return {"type": comparison.outcome}
    if input_tokens is None:
        return {"type": "unavailable"}
    if comparison.extends:
        # The prompts agree: a hit if the engine reused the prefix, else it did not hold it (not a reason the SDK
        # names).
        return {"type": "cache_hit" if cached_tokens >= comparison.expected else "unavailable"}
    return {
        "type": "cache_miss",
        "reason": comparison.reason or "input_changed",
        "cache_missed_tokens": max(0, input_tokens - cached_tokens),
        "comparison_reusable_tokens": comparison.shared,
    }


@dataclass(frozen=True, slots=True)
class Compared:
    """The response a request names in comparison_response_id, as looked up: `found` False when no response of
    the tenant has that id; `fingerprint` None when it has none (stored before fingerprints were)."""

    found: bool
    fingerprint: Fingerprint | None = None


def comparison_with(compared: Compared, current: Fingerprint, prompt: Sequence[int], reuse: KvReuse) -> Comparison:
    if not compared.found:
        return Comparison("comparison_response_not_found")
    return compare(compared.fingerprint, current, prompt, reuse)


def job_diagnostics(comparison: dict[str, Any] | None, usage: tuple[int, int] | None) -> dict[str, Any] | None:
    """A job's `prompt_cache_diagnostics` at its end: None when its request named no comparison; `usage`: its
    (input tokens, cached tokens), None when it ended with no usage (failed)."""
    if comparison is None:
        return None
    input_tokens, cached_tokens = usage if usage is not None else (None, 0)
    return diagnose(Comparison.from_payload(comparison), input_tokens, cached_tokens)
