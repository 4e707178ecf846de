"""Distributed mode's fair order (fair_order.py's, written into Redis): the score a job is queued with in its
model's arq queue, so that workers, which take the lowest scores first, serve class first, then tenants in turn,
each tenant's jobs in order.

arq keeps a queue as a sorted set scored by enqueue time in ms, and a worker takes the lowest scores that are <=
now: a score in the future defers a job, so every score here lies in the past. Each class has a band of scores
far behind any real enqueue time (interactive's lowest, then background's, then batch's); within a band, a job's
score is the band's base plus its round, given by start-time fair queuing with one step per job:

- the round being served is the lowest round still in the band (arq keeps a job in its queue until it ends, so
  that is the oldest job waiting or running); with none there, the highest round handed out so far;
- a tenant's job takes the round being served, or the one after its own previous job's, whichever is later.

So a tenant with 500 jobs queued holds rounds r..r+499, and another tenant's first job takes round r: it sorts
beside the first of them, not after the last. One Lua script reads and writes the state (per queue and class: a
hash of each tenant's last round and the highest round), so that API nodes enqueueing at once never hand out the
same round to one tenant twice.

NOTE: arq logs a job it starts as `delayed=` the time since its score: these scores make that figure
meaningless. The enqueue time a job carries (and its own queueing metrics) stay true.
"""

from __future__ import annotations

from arq.connections import ArqRedis

from app.generation.job import JOB_CLASSES, GenerationJob, JobClass
from app.transport.redis_bus import KEY_PREFIX

#: The first score of the interactive band, in ms since the epoch (2001-09-09): far behind any enqueue time, so
#: a job scored in any band is never deferred.
FIRST_SCORE_MS = 1_000_000_000_000
#: Rounds in one class's band: more than a queue serves in its lifetime (a million jobs a day for 270 years).
BAND_ROUNDS = 100_000_000_000
#: The per-queue state is forgotten after this long without an enqueue (its queue long empty, nothing is lost).
STATE_TTL_S = 7 * 24 * 3600

_NEXT_ROUND = """
local lowest = redis.call('zrangebyscore', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES', 'LIMIT', 0, 1)
local highest = tonumber(redis.call('hget', KEYS[2], 'highest') or '0')
local round = highest
if #lowest > 0 then
  round = tonumber(lowest[2]) - tonumber(ARGV[1])
end
local field = 'tenant:' .. ARGV[3]
local previous = redis.call('hget', KEYS[2], field)
if previous and tonumber(previous) + 1 > round then
  round = tonumber(previous) + 1
end
redis.call('hset', KEYS[2], field, round)
if round > highest then
  redis.call('hset', KEYS[2], 'highest', round)
end
redis.call('expire', KEYS[2], ARGV[4])
return round
"""


def band_base_ms(job_class: JobClass) -> int:
    """The lowest score of the class's band."""
    return FIRST_SCORE_MS + JOB_CLASSES.index(job_class) * BAND_ROUNDS


def rounds_key(queue: str, job_class: JobClass) -> str:
    """Where the rounds of a queue's jobs of one class are kept."""
    return f"{KEY_PREFIX}:rounds:{job_class}:{queue}"


async def fair_score(redis: ArqRedis, queue: str, job: GenerationJob) -> int:
    """The score to queue `job` with in `queue`: its class's band, then its tenant's next round."""
    base = band_base_ms(job.job_class)
    round_ = await redis.eval(  # type: ignore[misc]
        _NEXT_ROUND,
        2,
        queue,
        rounds_key(queue, job.job_class),
        str(base),
        f"({base + BAND_ROUNDS}",
        job.tenant,
        str(STATE_TTL_S),
    )
    return base + int(round_)
