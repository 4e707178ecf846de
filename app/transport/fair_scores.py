"""Distributed mode's fair order (generation/job.py's FairOrder, written into Redis): the score a job is queued
with in its model's arq queue, so that workers, which take the lowest scores first, serve the same turns as the
embedded waiting room: each tenant's jobs of a class are a flow, each job waits under its flow's next start tag
(`start_tag`, its class's weight its share), the lowest tag first, a tie to the more urgent class.

arq keeps a queue as a sorted set scored by enqueue time in ms, and a worker takes the lowest scores that are <=
now: a score in the future defers a job, so every score here lies in the past, from FIRST_SCORE_MS on (2001), far
behind any real enqueue time. A job's score is FIRST_SCORE_MS + its tag * len(JOB_CLASSES) + its class's index
(the tie-break); its tag is given by start-time fair queuing:

- the tag being served is the lowest tag still in the queue (arq keeps a job in its queue until it ends, so that
  is the oldest job waiting or running); with the queue empty, the clock starts again at 0 (no flow is waiting,
  so none is owed anything, and the scores never creep towards the present);
- a flow's job takes the tag being served, or its previous job's plus its class's step, whichever is later.

So a tenant with 500 jobs queued holds tags r..r+499 steps, another tenant's first job takes tag r: it sorts
beside the first of them, not after the last; and one tenant's interactive flood and another's background jobs
take turns by their weights. One Lua script reads and writes the state (per queue: a hash of each flow's last tag),
so that API nodes enqueueing at once never hand out the same tag to one flow twice.

NOTE: arq logs a job it starts as `delayed=` the time since its score: these scores make that figure
meaningless. The enqueue time a job carries (and its own queueing metrics) stay true. Jobs queued by an older
version in the background and batch bands (scores from FIRST_SCORE_MS + 10^11 on) still run, after today's.
"""

from __future__ import annotations

from arq.connections import ArqRedis

from app.generation.job import JOB_CLASSES, ClassWeights, GenerationJob, JobClass
from app.transport.redis_bus import KEY_PREFIX

#: The lowest score, in ms since the epoch (2001-09-09): far behind any enqueue time, so no job is deferred.
FIRST_SCORE_MS = 1_000_000_000_000
#: The width of the scores a queue's fair order uses (10^11 ms: tags up to 3.3 * 10^10, and the clock restarts
#: whenever the queue is empty).
BAND_ROUNDS = 100_000_000_000
#: The per-queue state is forgotten after this long without an enqueue (its queue long empty, nothing is lost).
STATE_TTL_S = 7 * 24 * 3600

# KEYS: the queue, its state. ARGV: the first score, the band's end (exclusive), the flow's name, its step, the
# state's TTL, how many classes share a tag.
_NEXT_TAG = """
local lowest = redis.call('zrangebyscore', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES', 'LIMIT', 0, 1)
local classes = tonumber(ARGV[6])
local tag = 0
if #lowest > 0 then
  tag = math.floor((tonumber(lowest[2]) - tonumber(ARGV[1])) / classes)
else
  redis.call('del', KEYS[2])
end
local previous = redis.call('hget', KEYS[2], ARGV[3])
if previous and tonumber(previous) + tonumber(ARGV[4]) > tag then
  tag = tonumber(previous) + tonumber(ARGV[4])
end
redis.call('hset', KEYS[2], ARGV[3], tag)
redis.call('expire', KEYS[2], ARGV[5])
return tag
"""


def class_of_score(score: float) -> JobClass:
    """The class a fairly scored job was queued in (its score's tie-break)."""
    return JOB_CLASSES[int(score - FIRST_SCORE_MS) % len(JOB_CLASSES)]


def tags_key(queue: str) -> str:
    """Where the last tag of each flow of a queue is kept."""
    return f"{KEY_PREFIX}:shares:{queue}"


async def fair_score(redis: ArqRedis, queue: str, job: GenerationJob, weights: ClassWeights) -> int:
    """The score to queue `job` with in `queue`: its flow's next tag, its class as the tie-break."""
    tag = await redis.eval(  # type: ignore[misc]
        _NEXT_TAG,
        2,
        queue,
        tags_key(queue),
        str(FIRST_SCORE_MS),
        f"({FIRST_SCORE_MS + BAND_ROUNDS}",
        f"{job.job_class}:{job.tenant}",
        str(weights.step(job.job_class)),
        str(STATE_TTL_S),
        str(len(JOB_CLASSES)),
    )
    return FIRST_SCORE_MS + int(tag) * len(JOB_CLASSES) + JOB_CLASSES.index(job.job_class)
