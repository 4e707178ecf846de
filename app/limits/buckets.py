"""The token-bucket arithmetic both backends share (Redis runs the same steps in Lua), what a check answers (a
`Verdict`: each limit's window as OpenAI's headers report it) and OpenAI's duration format for its resets."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

#: A bucket refills its whole capacity in one minute (the limits are per minute).
REFILL_S = 60.0


class Step(enum.StrEnum):
    """What one check does to one bucket."""

    #: Read it only.
    PEEK = "peek"
    #: Take `cost` if the bucket holds it, else refuse (and take nothing from any bucket of the check).
    TAKE = "take"
    #: Take `cost` unconditionally (the bucket may go below zero: a debt that later requests wait out), or give
    #: it back when negative (never past full).
    CHARGE = "charge"


class Limit(enum.StrEnum):
    """The two limits, named as OpenAI's headers and its 429's `type` name them."""

    REQUESTS = "requests"
    TOKENS = "tokens"


@dataclass(frozen=True, slots=True)
class BucketStep:
    limit: Limit
    #: The bucket's size: the limit per minute (> 0).
    capacity: int
    step: Step
    cost: float = 0.0


def refilled(level: float, at_s: float, now_s: float, capacity: int) -> float:
    """A bucket's level at `now_s`, from `level` at `at_s`: it refills at capacity / minute, up to full."""
    if now_s <= at_s:
        return level
    return min(float(capacity), level + (now_s - at_s) * capacity / REFILL_S)


def after_step(level: float, step: BucketStep) -> float:
    """The level once a (not refused) step has been applied."""
    if step.step is Step.PEEK:
        return level
    return min(float(step.capacity), level - step.cost)


def refuses(level: float, step: BucketStep) -> bool:
    return step.step is Step.TAKE and level < step.cost


@dataclass(frozen=True, slots=True)
class Window:
    """One limit as a response reports it (OpenAI's x-ratelimit-*-<limit> headers)."""

    limit: Limit
    capacity: int
    #: The bucket's level after the check (negative: in debt, after a correction).
    level: float

    @property
    def remaining(self) -> int:
        return max(0, math.floor(self.level))

    @property
    def reset_s(self) -> float:
        """Seconds until the bucket is full again (OpenAI: "until the rate limit resets to its initial state")."""
        return max(0.0, (self.capacity - self.level) * REFILL_S / self.capacity)

    def wait_s(self, cost: float) -> float:
        """Seconds until the bucket holds `cost`."""
        return max(0.0, (cost - self.level) * REFILL_S / self.capacity)

    def headers(self) -> dict[str, str]:
        name = self.limit.value
        return {
            f"x-ratelimit-limit-{name}": str(self.capacity),
            f"x-ratelimit-remaining-{name}": str(self.remaining),
            f"x-ratelimit-reset-{name}": openai_duration(self.reset_s),
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one check found: each limit that is on, and which one refused it (None: admitted)."""

    windows: tuple[Window, ...]
    refused: BucketStep | None = None

    def window(self, limit: Limit) -> Window | None:
        return next((window for window in self.windows if window.limit is limit), None)

    def headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for window in self.windows:
            headers.update(window.headers())
        return headers


def openai_duration(seconds: float) -> str:
    """A duration as OpenAI's headers write it (Go's format, to the millisecond): "20ms", "1s", "6m0s", "1.5s"."""
    ms = math.ceil(seconds * 1000 - 1e-6)
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    whole, fraction = divmod(ms, 1000)
    text = f"{whole}.{fraction:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text
