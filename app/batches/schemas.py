"""The Batch API's wire format, named and shaped as the SDK's Batch, BatchError, BatchRequestCounts, the create
parameters and the lines of a batch's output and error files."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, field_validator

from app.schemas.metadata import check_metadata

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]
#: The endpoints and windows a batch may name today.
BATCH_ENDPOINTS = ("/v1/responses",)
COMPLETION_WINDOWS = ("24h",)


class CreateBatchRequest(BaseModel):
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None
    # NOTE: accepted as the SDK sends it; the files a batch writes are kept until deleted.
    output_expires_after: dict[str, Any] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_metadata(value)


class BatchError(BaseModel):
    code: str | None = None
    line: int | None = None
    message: str | None = None
    param: str | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError]


class BatchRequestCounts(BaseModel):
    completed: int
    failed: int
    total: int


class InputTokensDetails(BaseModel):
    cached_tokens: int


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int


class BatchUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class BatchObject(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    completion_window: str
    input_file_id: str
    status: BatchStatus
    created_at: int
    expires_at: int | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: BatchErrors | None = None
    metadata: dict[str, str] | None = None
    model: str | None = None
    request_counts: BatchRequestCounts
    usage: BatchUsage


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class LineResponse(BaseModel):
    status_code: int
    request_id: str
    body: dict[str, Any]


class LineError(BaseModel):
    code: str
    message: str


class OutputLine(BaseModel):
    """One line of a batch's output or error file."""

    id: str
    custom_id: str
    response: LineResponse | None
    error: LineError | None
