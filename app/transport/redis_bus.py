"""Distributed mode's event bus: Redis pub/sub, one channel a response (live fan-out only; nothing kept)."""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from app.events.encoding import EncodedEvent, event_json

KEY_PREFIX = "llama-responses"
CANCEL_CHANNEL = f"{KEY_PREFIX}:cancel"
STEER_CHANNEL = f"{KEY_PREFIX}:steer"
#: The name of a queue that a job was just put on: its workers poll it at once instead of at their next poll.
JOB_READY_CHANNEL = f"{KEY_PREFIX}:job-ready"
SUBSCRIBE_CONFIRM_TIMEOUT_S = 5.0


def events_channel(response_id: str) -> str:
    return f"{KEY_PREFIX}:events:{response_id}"


async def subscribe_confirmed(pubsub: PubSub, channel: str) -> None:
    """Subscribe and wait until Redis confirms, so that nothing published afterwards can be missed."""
    await pubsub.subscribe(channel)
    deadline = time.monotonic() + SUBSCRIBE_CONFIRM_TIMEOUT_S
    while time.monotonic() < deadline:
        message = await pubsub.get_message(timeout=deadline - time.monotonic())
        if message is not None and message["type"] == "subscribe":
            return
    raise ConnectionError(f"Redis did not confirm the subscription to {channel}")


class RedisSubscription:
    def __init__(self, pubsub: PubSub) -> None:
        self._pubsub = pubsub

    async def next(self, timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
            if message is not None and message["type"] == "message":
                return EncodedEvent.parse(message["data"])
        return None

    async def close(self) -> None:
        await self._pubsub.aclose()  # type: ignore[no-untyped-call]


class RedisBus:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def publish(self, response_id: str, event: dict[str, Any]) -> None:
        await self._redis.publish(events_channel(response_id), event_json(event))

    async def subscribe(self, response_id: str) -> RedisSubscription:
        pubsub = self._redis.pubsub()
        try:
            await subscribe_confirmed(pubsub, events_channel(response_id))
        except BaseException:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
            raise
        return RedisSubscription(pubsub)
