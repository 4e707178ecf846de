"""The distributed-mode test cluster (two API nodes and an arq worker on Postgres and Redis, the real model) and the
helpers its tests share; conftest.py starts one for the whole package."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import openai

from app.testing.servers import SdkClients, ServerProcess

DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/9"


@dataclass
class Cluster:
    database_url: str
    redis_url: str
    api_a: ServerProcess
    api_b: ServerProcess
    worker: ServerProcess
    logs: Path
    #: Every worker started, so that teardown stops them all (a leaked one would take later runs' jobs).
    workers: list[ServerProcess]
    clients: SdkClients

    def env(self) -> dict[str, str]:
        return {"RESPONSES_DATABASE_URL": self.database_url, "RESPONSES_REDIS_URL": self.redis_url}

    def client(self, node: ServerProcess) -> openai.OpenAI:
        return self.clients(node.base_url)

    def new_worker(self, name: str, **env: str) -> ServerProcess:
        worker = ServerProcess({**self.env(), **env}, self.logs / f"{name}.log", command=["worker"]).start()
        self.workers.append(worker)
        return worker


def model_of(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def poll_until(
    client: openai.OpenAI, response_id: str, status: str, timeout_s: float = 30
) -> openai.types.responses.Response:
    deadline = time.monotonic() + timeout_s
    response = client.responses.retrieve(response_id)
    while response.status != status and time.monotonic() < deadline:
        time.sleep(0.05)
        response = client.responses.retrieve(response_id)
    return response


def poll(client: openai.OpenAI, response_id: str, timeout_s: float = 60) -> openai.types.responses.Response:
    deadline = time.monotonic() + timeout_s
    response = client.responses.retrieve(response_id)
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.1)
        response = client.responses.retrieve(response_id)
    return response
