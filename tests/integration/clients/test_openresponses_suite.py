"""The Open Responses compliance suite (vendored at ../shared/openresponses, run on Node with tsx) against the
shipped model, embedded and distributed (an API node and a worker on Postgres and Redis): every test passes but
image input (the model reads text only), and where a test asks the tiny model to stop on its own or to choose a
tool, only the model may fail it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from app.testing.cluster import Cluster
from app.testing.databases import fresh_postgres_database, sqlite_url
from app.testing.servers import ServerProcess, run_cli, wait_until_ready

pytestmark = pytest.mark.integration

REPOSITORY = Path(__file__).resolve().parents[3]
SUITE = Path(os.environ.get("OPENRESPONSES_SUITE", REPOSITORY.parent / "shared" / "openresponses"))
#: A writable copy of the suite with its two npm dependencies (tsx, zod), installed once per machine.
SUITE_WORK = Path.home() / ".cache" / "llama-responses" / "openresponses"
#: Every test of the suite but image input. The HTTP ones run together, as the suite runs them; the WebSocket ones
#: one at a time: each of their turns has 30 s, which a loaded 2-core machine misses with ~16 responses queued.
HTTP_TESTS = (
    "basic-response",
    "assistant-phase",
    "response-output-phase-schema",
    "streaming-response",
    "system-prompt",
    "tool-calling",
    "multi-turn",
    "compact-response",
    "compact-missing-model",
)
WEBSOCKET_TESTS = (
    "websocket-response",
    "websocket-sequential-responses",
    "websocket-continuation",
    "websocket-reconnect-store-false-recovery",
    "websocket-previous-response-not-found",
    "websocket-failed-continuation-evicts-cache",
    "websocket-compact-new-chain",
)
#: The protocol's own tests: what they check never depends on what the model writes.
PROTOCOL_TESTS = (
    "response-output-phase-schema",
    "compact-response",
    "compact-missing-model",
    "websocket-previous-response-not-found",
    "websocket-failed-continuation-evicts-cache",
)
#: What only the model decides, and so may fail: whether a free answer ends before the output cap (the suite
#: expects `completed`), and whether it chooses to call the offered tool (tool_choice "auto"). With the shipped
#: model, 13 or 14 of the 16 pass; the others are the model's, on the prompt its own chat template renders (the
#: same 38 tokens llama-server renders with --jinja, default system prompt included):
#: - websocket-response: to "Count from 1 to 3." at temperature 0 it writes "1. 1. 1. 1. 2. 2. 3. 3. 4. 4. 5. 5.
#:   6. 6. ..." and counts on (past 320 after 1,500 tokens), so the answer is truthfully `incomplete` at the cap;
#:   llama-server's /v1/chat/completions writes "1. 1. 1. 1. ..." for all of its 400 tokens.
#: - streaming-response, on some runs: to "Count from 1 to 5." it writes "1. 1\n2. 2\n3. 3\n4. 4\n5. 5\n\nThis is a
#:   classic example of a mathematical sequence where each term is obtained by adding a fixed constant to the
#:   previous term. In this case, the sequence is 1, 2, 4, 8, 16, ..." and goes on with larger numbers (1,500 tokens
#:   read cold here, 400 on llama-server); it ends on its own only on some runs, when the HTTP tests' prompts are
#:   read in one batch (at temperature 0, llama.cpp's rounding in a batch of another shape can change the path).
#: - tool-calling: to "What's the weather like in San Francisco?" it answers "The weather in San Francisco is
#:   generally described as sunny, with a high of 82°F (28°C) ..." and ends (66 tokens). Offered the tool as
#:   SmolLM2's tool-calling prompt does ("You are an expert in composing functions. ..." with the tools in
#:   `<tools>[...]</tools>`, calls as `<tool_call>[...]</tool_call>`), it answers 'The weather in San Francisco is
#:   described as "San Francisco is a city with a unique blend of culture and technology."' instead: the first
#:   token of a call ("<") has p = 0.009 there (0.002 with ours), against 0.22 for "The". The 135M model was not
#:   trained to call tools; `<tool_call>` is not even a token of its vocabulary. llama-server, offered the tool,
#:   answers in text too ("San Francisco is a city known for its vibrant culture ...", 140 tokens).
MODEL_VERDICTS = (
    re.compile(r'(Turn \d+: )?Expected status "completed" but got "incomplete"'),
    re.compile(r'Expected output item of type "function_call" but none found'),
)
RUN_TIMEOUT_S = 300


#: The servers the suite runs against: the shipped model, capped and greedy.
SUITE_ENV = {
    # The suite sends no max_output_tokens: capped, a rambling answer ends in seconds, not at the context's end.
    # 128 lets the model end on its own where it does end: "Reply with exactly: first" takes it 65 tokens read
    # cold (64 cut it, and websocket-sequential-responses wants `completed`; llama-server's answers to it and to
    # "...: second" end at 80 and 86 tokens); a WebSocket turn that runs to the cap took 4-6 s on the 2-core
    # machine at a load average of 11-13, within the suite's 30 s.
    "RESPONSES_DEFAULT_MAX_OUTPUT_TOKENS": "128",
    "RESPONSES_DEFAULT_TEMPERATURE": "0",
    "RESPONSES_COMPACTION_MAX_OUTPUT_TOKENS": "48",
    # One llama.cpp thread: two on two cores contend with node and the test runner in their spin-waits, and a
    # WebSocket turn could miss the suite's 30 s.
    "RESPONSES_N_THREADS": "1",
}
DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/9"


@dataclass(frozen=True)
class SuiteTarget:
    """The API node the suite talks to, and the logs of every process behind it."""

    server: ServerProcess
    logs: list[Path]


@pytest.fixture(scope="module", params=["embedded", "distributed"])
def suite_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SuiteTarget]:
    """Embedded (SQLite, in-process generation), or distributed (an API node and a worker on Postgres and Redis)."""
    directory = tmp_path_factory.mktemp("openresponses")
    if request.param == "embedded":
        server = ServerProcess({**SUITE_ENV, "RESPONSES_DATABASE_URL": sqlite_url(directory)}, directory / "server.log")
        try:
            yield SuiteTarget(server.start(), [server.log_path])
        finally:
            server.stop()
        return
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    with redis.Redis.from_url(redis_url) as connection:
        connection.flushdb()
    with fresh_postgres_database() as database_url:
        cluster = Cluster(database_url, redis_url, directory, dict(SUITE_ENV))
        migrated = run_cli(["migrate"], cluster.env())
        assert migrated.returncode == 0, migrated.stderr
        try:
            api = cluster.api()
            cluster.worker()
            wait_until_ready(api.base_url)
            yield SuiteTarget(api, [process.log_path for process in cluster.processes])
        finally:
            cluster.stop_all()


def run_suite(server: ServerProcess, test_ids: tuple[str, ...]) -> dict[str, dict]:
    """The suite's verdicts on `test_ids`, id -> its JSON result (status, errors)."""
    runner = SUITE / "run.sh"
    assert runner.exists(), f"the Open Responses suite is not at {SUITE} (set OPENRESPONSES_SUITE)"
    assert shutil.which("node") and shutil.which("npm"), "the Open Responses suite needs node and npm"
    command = [str(runner), "-u", f"{server.base_url}/v1", "-k", "unused", "-m", "SmolLM2-135M-Instruct.Q4_1"]
    result = subprocess.run(
        [*command, "-f", ",".join(test_ids), "--json"],
        env={**os.environ, "OPENRESPONSES_WORK": str(SUITE_WORK)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert result.stdout.strip(), result.stderr  # npm could not install tsx, or node failed to start
    outcomes = {outcome["id"]: outcome for outcome in json.loads(result.stdout)["results"]}
    assert set(outcomes) == set(test_ids), sorted(outcomes)
    return outcomes


def only_the_model_failed(outcome: dict) -> bool:
    errors = outcome.get("errors") or []
    return bool(errors) and all(any(verdict.fullmatch(error) for verdict in MODEL_VERDICTS) for error in errors)


def test_the_open_responses_suite_passes_but_for_image_input(suite_target: SuiteTarget) -> None:
    outcomes = run_suite(suite_target.server, HTTP_TESTS)
    for test_id in WEBSOCKET_TESTS:
        outcomes |= run_suite(suite_target.server, (test_id,))
    failed = {test_id: outcome for test_id, outcome in outcomes.items() if outcome["status"] != "passed"}
    not_the_model = {
        test_id: outcome.get("errors") for test_id, outcome in failed.items() if not only_the_model_failed(outcome)
    }
    assert not not_the_model, json.dumps(not_the_model, indent=2)
    assert not set(failed) & set(PROTOCOL_TESTS), failed
    for log_path in suite_target.logs:
        log = log_path.read_text()
        assert "Traceback" not in log, log
