"""The bare endpoint that figure 5 compares GET /v1/responses/{id} with: FastAPI, one route, a constant body,
run by uvicorn.run with the same arguments as `llama-responses serve`."""

from __future__ import annotations

import argparse

import uvicorn
from fastapi import FastAPI

app = FastAPI()
BODY: dict[str, object] = {"id": "resp_bare", "object": "response", "status": "completed", "output": []}


@app.get("/bare")
async def bare() -> dict[str, object]:
    return BODY


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port, log_level="warning")
