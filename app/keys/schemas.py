"""API keys on the wire (GET/POST /v1/keys, DELETE /v1/keys/{id}): shaped after the openai SDK's admin API keys
(`redacted_value`, and `value` only in the answer to a create); a project's limits (GET/POST
/v1/projects/{id}/limits)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.tenants.identity import Role

#: The longest project or key name.
MAX_NAME_CHARS = 128


def _a_name(value: str) -> str:
    """A name without surrounding spaces, not empty, without control characters."""
    value = value.strip()
    if not value:
        raise ValueError("must not be empty")
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise ValueError("must not hold control characters")
    return value


class ApiKeyCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: The project's name; the project is created if it does not exist.
    project: str = Field(max_length=MAX_NAME_CHARS)
    name: str = Field(max_length=MAX_NAME_CHARS)
    role: Role = "member"

    @field_validator("project", "name")
    @classmethod
    def _names(cls, value: str) -> str:
        return _a_name(value)


class ApiKey(BaseModel):
    object: Literal["api_key"] = "api_key"
    id: str
    name: str
    role: Role
    #: The project's name, and its id (the tenant its keys share is "project:" + this id).
    project: str
    project_id: str
    #: The key's first and last characters: enough to recognise it, never to use it.
    redacted_value: str
    created_at: int
    last_used_at: int | None = None
    revoked_at: int | None = None


class CreatedApiKey(ApiKey):
    #: The key itself: in this answer only. The server keeps its hash.
    value: str


class ApiKeyList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ApiKey]


#: A project's limits, in the order they are shown (each a column of `projects`).
LIMIT_NAMES = (
    "requests_per_min",
    "tokens_per_min",
    "max_concurrent_requests",
    "max_queued_background",
    "max_stored_bytes",
)
#: The largest value of a limit kept in an INTEGER column (a BIGINT for stored bytes).
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
# Strict: true or 2.5 is no number of requests.
Int32Limit = Annotated[int | None, Field(strict=True, ge=0, le=MAX_INT32)]


class ProjectLimitsUpdate(BaseModel):
    """POST /v1/projects/{id}/limits: each field given is set (null: back to the server's setting; 0: off); a field
    left out stays as it is."""

    model_config = ConfigDict(extra="forbid")

    requests_per_min: Int32Limit = None
    tokens_per_min: Int32Limit = None
    max_concurrent_requests: Int32Limit = None
    max_queued_background: Int32Limit = None
    max_stored_bytes: Annotated[int | None, Field(strict=True, ge=0, le=MAX_INT64)] = None

    def changes(self) -> dict[str, int | None]:
        """The fields the request gave, with their values."""
        return {name: getattr(self, name) for name in LIMIT_NAMES if name in self.model_fields_set}


class LimitValues(BaseModel):
    requests_per_min: int | None
    tokens_per_min: int | None
    max_concurrent_requests: int | None
    max_queued_background: int | None
    max_stored_bytes: int | None


class ProjectLimits(BaseModel):
    object: Literal["project.limits"] = "project.limits"
    project_id: str
    #: The project's name.
    project: str
    #: What the operator set for this project (null: the server's setting).
    overrides: LimitValues
    #: What applies to it: its overrides over the server's settings (0: off).
    effective: LimitValues


class ProjectLimitsList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ProjectLimits]
