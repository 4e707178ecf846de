"""Distributed mode's event bus: Redis pub/sub, one channel a response (live fan-out only; nothing kept)."""

from __future__ import annotations

import json
import time
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

KEY_PREFIX = "llama-responses"
CANCEL_CHANNEL = f"{KEY_PREFIX}:cancel"
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
                event: dict[str, Any] = json.loads(message["data"])
                return event
        return None

    async def close(self) -> None:
        await self._pubsub.aclose()  # type: ignore[no-untyped-call]


class RedisBus:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def publish(self, response_id: str, event: dict[str, Any]) -> None:
        await self._redis.publish(events_channel(response_id), json.dumps(event, separators=(",", ":")))

    async def subscribe(self, response_id: str) -> RedisSubscription:
        pubsub = self._redis.pubsub()
        try:
            await subscribe_confirmed(pubsub, events_channel(response_id))
        except BaseException:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
            raise
        return RedisSubscription(pubsub)
