"""The bucket arithmetic, OpenAI's duration format, and the in-process store on a fake clock."""

from __future__ import annotations

import pytest

from app.errors import RateLimited, TokensRateLimited
from app.limits.buckets import BucketStep, Limit, Step, Window, openai_duration
from app.limits.limiter import TenantRateLimits
from app.limits.memory_store import MemoryBucketStore
from app.limits.policy import TenantLimits
from app.testing.fakes import FakeClock


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.02, "20ms"), (0.0004, "1ms"), (1, "1s"), (1.5, "1.5s"), (8.64, "8.64s"), (360, "6m0s"),
     (90.25, "1m30.25s"), (3600, "1h0m0s"), (3723, "1h2m3s")],
)  # fmt: skip
def test_durations_are_written_as_openai_writes_them(seconds: float, text: str) -> None:
    assert openai_duration(seconds) == text


def test_a_window_reports_what_is_left_and_when_it_is_full() -> None:
    window = Window(Limit.TOKENS, 600, 450.5)
    assert window.remaining == 450
    assert window.reset_s == pytest.approx(14.95)
    assert window.wait_s(500) == pytest.approx(4.95)
    assert window.headers() == {
        "x-ratelimit-limit-tokens": "600",
        "x-ratelimit-remaining-tokens": "450",
        "x-ratelimit-reset-tokens": "14.95s",
    }
    assert Window(Limit.REQUESTS, 10, -3).remaining == 0


async def test_a_refused_take_changes_no_bucket() -> None:
    clock = FakeClock()
    store = MemoryBucketStore(clock)
    steps = [BucketStep(Limit.REQUESTS, 10, Step.TAKE, 1), BucketStep(Limit.TOKENS, 100, Step.TAKE, 150)]
    refused, levels = await store.apply("t", steps)
    assert refused == 1
    assert levels == [10, 100]
    refused, levels = await store.apply("t", [BucketStep(Limit.REQUESTS, 10, Step.PEEK)])
    assert (refused, levels) == (None, [10])


async def test_a_bucket_refills_evenly_over_a_minute_and_is_forgotten_once_full() -> None:
    clock = FakeClock()
    store = MemoryBucketStore(clock)
    take = BucketStep(Limit.REQUESTS, 6, Step.TAKE, 1)
    for expected in (5, 4, 3, 2, 1, 0):
        assert await store.apply("t", [take]) == (None, [expected])
    assert await store.apply("t", [take]) == (0, [0])
    clock.now_s += 10  # 6 a minute: one every 10 s
    assert await store.apply("t", [take]) == (None, [0])
    clock.now_s += 60
    assert await store.apply("t", [BucketStep(Limit.REQUESTS, 6, Step.PEEK)]) == (None, [6])
    await store.apply("t", [BucketStep(Limit.REQUESTS, 6, Step.CHARGE, -1)])
    assert store._buckets == {}


async def test_requests_per_minute_refuse_with_the_wait_until_one_is_back() -> None:
    clock = FakeClock()
    limits = TenantRateLimits(MemoryBucketStore(clock), requests_per_min=2)
    first = await limits.admit_request("t")
    second = await limits.admit_request("t")
    assert [first.headers()["x-ratelimit-remaining-requests"], second.headers()["x-ratelimit-remaining-requests"]] == [
        "1",
        "0",
    ]
    with pytest.raises(RateLimited) as refused:
        await limits.admit_request("t")
    error = refused.value
    assert error.status_code == 429
    assert error.body()["error"]["type"] == "requests"
    assert error.code == "rate_limit_exceeded"
    assert error.headers["retry-after"] == "30"
    assert error.headers["retry-after-ms"] == "30000"
    assert error.headers["x-ratelimit-reset-requests"] == "1m0s"
    assert "Limit 2, Used 2, Requested 1" in error.message
    clock.now_s += 30
    assert (await limits.admit_request("t")).headers()["x-ratelimit-remaining-requests"] == "0"


async def test_tokens_are_charged_on_admission_and_corrected_by_the_output() -> None:
    clock = FakeClock()
    limits = TenantRateLimits(MemoryBucketStore(clock), tokens_per_min=100)
    assert (await limits.admit_tokens("t", 40)).headers()["x-ratelimit-remaining-tokens"] == "60"
    await limits.charge_tokens("t", 70)  # the output, when it ends: the bucket goes into debt
    assert (await limits.peek("t")).headers()["x-ratelimit-remaining-tokens"] == "0"
    with pytest.raises(TokensRateLimited) as refused:
        await limits.admit_tokens("t", 5)
    assert refused.value.body()["error"]["type"] == "tokens"
    assert refused.value.headers["retry-after-ms"] == "9000"  # from -10 to 5 at 100 a minute
    clock.now_s += 9
    await limits.admit_tokens("t", 5)


async def test_a_request_larger_than_a_whole_minute_says_not_to_retry() -> None:
    limits = TenantRateLimits(MemoryBucketStore(FakeClock()), tokens_per_min=100)
    with pytest.raises(TokensRateLimited) as refused:
        await limits.admit_tokens("t", 101)
    assert refused.value.headers == {"x-should-retry": "false"}
    assert "Request too large" in refused.value.message


async def test_limits_that_are_off_check_nothing() -> None:
    limits = TenantRateLimits(MemoryBucketStore(FakeClock()))
    assert not (await limits.policy.limits_of("t")).rate_limited
    for _ in range(100):
        assert (await limits.admit_request("t")).headers() == {}
        assert (await limits.admit_tokens("t", 10**6)).headers() == {}


async def test_tenants_have_buckets_of_their_own() -> None:
    limits = TenantRateLimits(MemoryBucketStore(FakeClock()), requests_per_min=1, tokens_per_min=10)
    await limits.admit_request("a")
    await limits.admit_tokens("a", 10)
    with pytest.raises(RateLimited):
        await limits.admit_request("a")
    assert (await limits.admit_request("b")).headers()["x-ratelimit-remaining-requests"] == "0"
    assert (await limits.admit_tokens("b", 10)).headers()["x-ratelimit-remaining-tokens"] == "0"


class TwoProjects:
    """A policy: tenant "small" has 1 request a minute, every other one the server's 3."""

    async def limits_of(self, tenant: str) -> TenantLimits:
        return TenantLimits(requests_per_min=1 if tenant == "small" else 3)


async def test_each_tenants_buckets_have_the_capacity_its_policy_answers() -> None:
    limits = TenantRateLimits(MemoryBucketStore(FakeClock()), requests_per_min=100, policy=TwoProjects())
    assert (await limits.admit_request("small")).headers()["x-ratelimit-limit-requests"] == "1"
    with pytest.raises(RateLimited) as refused:
        await limits.admit_request("small")
    assert "Limit 1, Used 1" in refused.value.message
    verdicts = [await limits.admit_request("big") for _ in range(3)]
    assert [verdict.headers()["x-ratelimit-limit-requests"] for verdict in verdicts] == ["3"] * 3
    assert [verdict.headers()["x-ratelimit-remaining-requests"] for verdict in verdicts] == ["2", "1", "0"]
