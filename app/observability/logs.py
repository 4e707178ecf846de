"""Structured logs: with RESPONSES_LOG_FORMAT=json, one JSON object a line, each carrying the ids of the work it
belongs to (request, response, tenant, model), taken from context variables that the request middleware, the
submission and the job execution bind. The tenant is the tenant label (a hash of the key), never the key."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

LogFormat = Literal["text", "json"]

#: The fields bound to the current request or job; a fresh dict each time (never mutated in place).
_CONTEXT: ContextVar[dict[str, str]] = ContextVar("llama_responses_log_context", default={})  # noqa: B039
CONTEXT_FIELDS = ("request_id", "response_id", "tenant", "model")
#: uvicorn's access log passes these as its record's args.
_ACCESS_ARGS = ("client", "method", "path", "http_version", "status")


def bind(**fields: str | None) -> None:
    """Add fields to the current context (for the rest of this request or job)."""
    _CONTEXT.set({**_CONTEXT.get(), **{name: value for name, value in fields.items() if value is not None}})


@contextmanager
def bound(**fields: str | None) -> Iterator[None]:
    """Fields for the duration of the block (a request, a job), then back to what was bound before."""
    token = _CONTEXT.set({**_CONTEXT.get(), **{name: value for name, value in fields.items() if value is not None}})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current() -> dict[str, str]:
    return dict(_CONTEXT.get())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_CONTEXT.get(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            entry.update(zip(_ACCESS_ARGS, record.args, strict=True))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(log_format: LogFormat, level: str = "info") -> None:
    """The root logger's one handler (stderr); uvicorn's loggers propagate to it when uvicorn is given no config."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
