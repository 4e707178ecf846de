"""A batch's input file checked as the hosted API checks it (`validating`): each line a JSON object with a unique
`custom_id`, `method` POST, the batch's endpoint as `url` and a `body`; at most MAX_LINES lines of at most
MAX_LINE_BYTES each. Read a chunk at a time, twice (checked, then stored), never whole."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from app.batches.schemas import BatchError
from app.config import Settings
from app.db.session import Database
from app.errors import InvalidRequest
from app.files.storage import read_lines
from app.schemas.parsing import check_json_text

MAX_LINES = 50_000
MAX_LINE_BYTES = 1_000_000
#: The most errors a failed batch reports (the first ones, by line).
MAX_ERRORS = 100


@dataclass(frozen=True, slots=True)
class LineRequest:
    line: int
    custom_id: str
    body: dict[str, Any]


def _error(line: int, code: str, message: str, param: str | None = None) -> BatchError:
    return BatchError(code=code, line=line, message=message, param=param)


def _check_line(
    raw: bytes | None, line: int, endpoint: str, settings: Settings, seen: set[str]
) -> LineRequest | BatchError:
    if raw is None:
        return _error(line, "line_too_large", f"This line is larger than the limit of {MAX_LINE_BYTES} bytes.")
    try:
        request = json.loads(raw)
    except (ValueError, RecursionError):
        return _error(line, "invalid_json_line", "This line is not parseable as valid JSON.")
    if not isinstance(request, dict):
        return _error(line, "invalid_json_line", "This line is not a JSON object.")
    try:
        check_json_text(request, settings.max_json_depth)
    except InvalidRequest as error:
        return _error(line, "invalid_request", error.message, error.param)
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return _error(line, "missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id")
    if request.get("method") != "POST":
        return _error(line, "invalid_method", "Invalid value for 'method': only POST is supported.", "method")
    if request.get("url") != endpoint:
        return _error(
            line,
            "invalid_url",
            f"Invalid value for 'url': every request of this batch must go to its endpoint '{endpoint}'.",
            "url",
        )
    if not isinstance(request.get("body"), dict):
        return _error(line, "invalid_request", "Missing required parameter: 'body' (a JSON object).", "body")
    if custom_id in seen:
        return _error(
            line,
            "duplicate_custom_id",
            "The custom_id for this request is a duplicate of another request. The custom_id parameter must be "
            "unique for each request in a batch.",
            "custom_id",
        )
    seen.add(custom_id)
    return LineRequest(line, custom_id, request["body"])


async def _checked(
    database: Database, file_id: str, endpoint: str, settings: Settings
) -> AsyncIterator[LineRequest | BatchError]:
    seen: set[str] = set()
    requests = 0
    number = 0
    async for raw in read_lines(database, file_id, MAX_LINE_BYTES):
        number += 1
        if raw is not None and not raw.strip():
            continue  # a blank line (a trailing one, or between requests) holds no request
        requests += 1
        if requests > MAX_LINES:
            yield BatchError(
                code="too_many_requests",
                message=f"A batch may hold at most {MAX_LINES} requests; this file has more.",
                line=number,
            )
            return
        yield _check_line(raw, number, endpoint, settings, seen)
    if requests == 0:
        yield BatchError(code="empty_file", message="The input file holds no request.")


async def check_file(
    database: Database, file_id: str, endpoint: str, settings: Settings
) -> tuple[list[BatchError], int]:
    """The file's errors (the first MAX_ERRORS) and its number of requests."""
    errors: list[BatchError] = []
    count = 0
    async for checked in _checked(database, file_id, endpoint, settings):
        if isinstance(checked, BatchError):
            if len(errors) < MAX_ERRORS:
                errors.append(checked)
        else:
            count += 1
    return errors, count


async def line_requests(
    database: Database, file_id: str, endpoint: str, settings: Settings
) -> AsyncIterator[LineRequest]:
    """The requests of a file that check_file found valid, in order."""
    async for checked in _checked(database, file_id, endpoint, settings):
        if isinstance(checked, LineRequest):
            yield checked
