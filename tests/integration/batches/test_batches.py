"""The Batch API on the real server and model, on SQLite and on Postgres, through the SDK: a JSONL file uploaded,
a batch polled to completed, each line's answer read back from the output file by custom_id."""

from __future__ import annotations

import json
import time

import openai

from app.testing.servers import ServerProcess

TERMINAL = ("completed", "failed", "expired", "cancelled")


def test_a_batch_runs_on_the_real_model(client: openai.OpenAI, server: ServerProcess, model: str) -> None:
    lines = [
        {
            "custom_id": f"q{index}",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": model, "input": f"Say the number {index}.", "max_output_tokens": 16, "temperature": 0},
        }
        for index in range(3)
    ]
    lines.append({"custom_id": "bad", "method": "POST", "url": "/v1/responses", "body": {"input": "x", "top_p": 9}})
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    uploaded = client.files.create(file=("questions.jsonl", data), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h")
    deadline = time.monotonic() + 180
    while batch.status not in TERMINAL:
        assert time.monotonic() < deadline, batch
        time.sleep(0.5)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed", batch.errors
    assert batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (3, 1)
    assert batch.output_file_id and batch.error_file_id
    output = {}
    for raw in client.files.content(batch.output_file_id).text.splitlines():
        line = json.loads(raw)
        output[line["custom_id"]] = line
    assert sorted(output) == ["q0", "q1", "q2"]
    for line in output.values():
        body = line["response"]["body"]
        assert line["response"]["status_code"] == 200 and body["status"] in ("completed", "incomplete")
        assert body["output"] and body["model"] == model
        # Stored, as a line is unless it says store: false: the same response as GET returns.
        assert client.responses.retrieve(body["id"]).output[0].id == body["output"][0]["id"]
    (error,) = client.files.content(batch.error_file_id).text.splitlines()
    assert json.loads(error)["response"]["body"]["error"]["param"] == "top_p"
