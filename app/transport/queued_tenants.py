"""Distributed mode's queued jobs by tenant and class (the metrics' queue depth by tenant), counted at a scrape.

arq's queue holds job ids only (a job's tenant is inside its pickled record), so beside each model's queue an
index names the tenant of each fairly scored job: a sorted set of "<job id> <tenant>", each with its job's score
(so its class is its score's tie-break, fair_scores.py). A scrape reads the index against the queue in one
script: an entry whose job is no longer there is dropped, one whose job a worker has taken (arq keeps it in the
queue until it ends) is not counted. The index stays about as large as the queue: each enqueue also drops entries
scored below the queue's oldest job or above its newest (whose jobs have all left) and those of the oldest's score
whose jobs have left.

The entry is written after its job is in the queue (and not at all if the job has already left it), so a scrape
never drops the entry of a job that is being enqueued; a job counts from that write on.
"""

from __future__ import annotations

from collections import Counter

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix

from app.generation.job import JOB_CLASSES, GenerationJob, JobClass
from app.transport.fair_scores import BAND_ROUNDS, FIRST_SCORE_MS, STATE_TTL_S
from app.transport.redis_bus import KEY_PREFIX

# KEYS: the queue, its index. ARGV: the job id, its tenant, the fair scores' first and their end (exclusive), the
# index's TTL.
_RECORD = """
local score = redis.call('zscore', KEYS[1], ARGV[1])
if not score then
  return 0
end
redis.call('zadd', KEYS[2], score, ARGV[1] .. ' ' .. ARGV[2])
local oldest = redis.call('zrangebyscore', KEYS[1], ARGV[3], ARGV[4], 'WITHSCORES', 'LIMIT', 0, 1)
if #oldest > 0 then
  redis.call('zremrangebyscore', KEYS[2], ARGV[3], '(' .. oldest[2])
  -- Above the newest job, none is left either (a queue that emptied starts its scores again, fair_scores.py).
  local newest = redis.call('zrevrangebyscore', KEYS[1], ARGV[4], ARGV[3], 'WITHSCORES', 'LIMIT', 0, 1)
  redis.call('zremrangebyscore', KEYS[2], '(' .. newest[2], ARGV[4])
  -- The oldest job's score is shared by at most one job a flow: those of them that left go too.
  for _, member in ipairs(redis.call('zrangebyscore', KEYS[2], oldest[2], oldest[2])) do
    local id = string.sub(member, 1, string.find(member, ' ', 1, true) - 1)
    if not redis.call('zscore', KEYS[1], id) then
      redis.call('zrem', KEYS[2], member)
    end
  end
end
redis.call('expire', KEYS[2], ARGV[5])
return 1
"""

# KEYS: the queue, its index. ARGV: arq's in-progress key prefix, the first fair score, how many classes.
# Returns a flat list: "<class index> <tenant>", its waiting jobs, ...
_COUNT = """
local counts = {}
local members = redis.call('zrange', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #members, 2 do
  local member = members[i]
  local space = string.find(member, ' ', 1, true)
  local id = string.sub(member, 1, space - 1)
  if not redis.call('zscore', KEYS[1], id) then
    redis.call('zrem', KEYS[2], member)
  elseif redis.call('exists', ARGV[1] .. id) == 0 then
    local class = math.floor(tonumber(members[i + 1]) - tonumber(ARGV[2])) % tonumber(ARGV[3])
    local key = class .. ' ' .. string.sub(member, space + 1)
    counts[key] = (counts[key] or 0) + 1
  end
end
local flat = {}
for key, count in pairs(counts) do
  flat[#flat + 1] = key
  flat[#flat + 1] = count
end
return flat
"""


def index_key(queue: str) -> str:
    """Where the tenants of a queue's fairly scored jobs are named."""
    return f"{KEY_PREFIX}:queued-tenants:{queue}"


async def record_queued(redis: ArqRedis, queue: str, job: GenerationJob) -> None:
    """Name the tenant of `job`, just enqueued in `queue` with a fair score."""
    await redis.eval(  # type: ignore[misc]
        _RECORD,
        2,
        queue,
        index_key(queue),
        job.response_id,
        job.tenant,
        str(FIRST_SCORE_MS),
        f"({FIRST_SCORE_MS + BAND_ROUNDS}",
        str(STATE_TTL_S),
    )


async def queued_by_tenant(redis: ArqRedis, queue: str) -> Counter[tuple[str, JobClass]]:
    """The jobs waiting in `queue` (not yet taken by a worker), by tenant and class."""
    flat = await redis.eval(  # type: ignore[misc]
        _COUNT, 2, queue, index_key(queue), in_progress_key_prefix, str(FIRST_SCORE_MS), str(len(JOB_CLASSES))
    )
    counts: Counter[tuple[str, JobClass]] = Counter()
    for raw_key, count in zip(flat[::2], flat[1::2], strict=True):
        index, tenant = raw_key.decode().split(" ", 1)
        counts[tenant, JOB_CLASSES[int(index)]] += int(count)
    return counts
