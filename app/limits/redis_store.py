"""Distributed mode's buckets: in Redis, shared by every API node and worker, each check one atomic Lua script on
the server's clock (so nodes' clocks never disagree); a bucket's keys expire once it would be full again."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis

from app.limits.buckets import REFILL_S, BucketStep

KEY_PREFIX = "llama-responses:ratelimit:"
#: Seconds a check may wait on Redis before it counts as an outage (a 503, as a create's enqueue would be).
REDIS_TIMEOUT_S = 2.0

# KEYS: one hash a bucket (level, at). ARGV[1]: now in ms, or "" for the server's clock; then per bucket: its
# capacity, cost and step (peek | take | charge). The same arithmetic as buckets.py: refill at capacity a minute up
# to full; a refused take changes nothing; a full bucket is deleted (absent = full).
APPLY_SCRIPT = """
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local refill_ms = tonumber(ARGV[2])
local levels = {}
local refused = 0
for i, key in ipairs(KEYS) do
  local base = 2 + (i - 1) * 3
  local capacity = tonumber(ARGV[base + 1])
  local cost = tonumber(ARGV[base + 2])
  local step = ARGV[base + 3]
  local saved = redis.call('HMGET', key, 'level', 'at')
  local level = tonumber(saved[1])
  local at = tonumber(saved[2])
  if level == nil then
    level = capacity
  elseif now > at then
    level = math.min(capacity, level + (now - at) * capacity / refill_ms)
  end
  levels[i] = level
  if step == 'take' and level < cost and refused == 0 then
    refused = i
  end
end
if refused == 0 then
  for i, key in ipairs(KEYS) do
    local base = 2 + (i - 1) * 3
    local capacity = tonumber(ARGV[base + 1])
    local cost = tonumber(ARGV[base + 2])
    local step = ARGV[base + 3]
    if step ~= 'peek' then
      local level = math.min(capacity, levels[i] - cost)
      levels[i] = level
      if level >= capacity then
        redis.call('DEL', key)
      else
        redis.call('HSET', key, 'level', tostring(level), 'at', tostring(now))
        redis.call('PEXPIRE', key, math.ceil((capacity - level) * refill_ms / capacity) + 1000)
      end
    end
  end
end
local out = {refused}
for i = 1, #levels do
  out[i + 1] = tostring(levels[i])
end
return out
"""


def bucket_key(tenant: str, limit: str) -> str:
    # The tenant in braces: a Redis Cluster keeps both of a tenant's buckets in one slot, as one script needs.
    return f"{KEY_PREFIX}{{{tenant}}}:{limit}"


class RedisBucketStore:
    """`clock` (seconds, for tests): the script uses it instead of Redis's own time."""

    def __init__(self, redis: Redis, *, clock: Callable[[], float] | None = None, owned: bool = False) -> None:
        self.redis = redis
        self.clock = clock
        #: Whether this store opened the connection (then it closes it).
        self.owned = owned
        self._script = redis.register_script(APPLY_SCRIPT)

    @classmethod
    def connect(cls, redis_url: str) -> RedisBucketStore:
        redis = Redis.from_url(redis_url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
        return cls(redis, owned=True)

    async def apply(self, tenant: str, steps: Sequence[BucketStep]) -> tuple[int | None, list[float]]:
        now = "" if self.clock is None else str(round(self.clock() * 1000))
        arguments: list[Any] = [now, str(round(REFILL_S * 1000))]
        for step in steps:
            arguments += [str(step.capacity), repr(float(step.cost)), step.step.value]
        keys = [bucket_key(tenant, step.limit.value) for step in steps]
        answer = await self._script(keys=keys, args=arguments)
        refused = int(answer[0])
        levels = [float(level) for level in answer[1:]]
        return (refused - 1 if refused else None), levels

    async def close(self) -> None:
        if self.owned:
            await self.redis.aclose()
