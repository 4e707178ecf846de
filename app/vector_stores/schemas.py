"""The Vector Stores API's wire format, named and shaped as the SDK's VectorStore, VectorStoreFile,
VectorStoreFileBatch, their create and update parameters, and the search page."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, field_validator

from app.schemas.metadata import check_metadata

AttributeValue = str | bool | int | float
Attributes = dict[str, AttributeValue]
FileStatus = Literal["in_progress", "completed", "cancelled", "failed"]
#: The attributes' bounds (as hosted): 16 keys of at most 64 characters, strings of at most 512.
MAX_ATTRIBUTES = 16
MAX_ATTRIBUTE_KEY_CHARS = 64
MAX_ATTRIBUTE_VALUE_CHARS = 512
#: Files one batch (or one create) attaches at most, as hosted.
MAX_BATCH_FILES = 2000


def check_attributes(value: Attributes | None) -> Attributes | None:
    if value is None:
        return None
    if len(value) > MAX_ATTRIBUTES:
        raise ValueError(f"at most {MAX_ATTRIBUTES} attributes are allowed, got {len(value)}")
    for key, item in value.items():
        if len(key) > MAX_ATTRIBUTE_KEY_CHARS:
            raise ValueError(f"attribute keys may be at most {MAX_ATTRIBUTE_KEY_CHARS} characters ({key[:16]!r}...)")
        if "\x00" in key or (isinstance(item, str) and "\x00" in item):
            raise ValueError("attributes may not contain the NUL character (\\u0000)")
        if isinstance(item, str) and len(item) > MAX_ATTRIBUTE_VALUE_CHARS:
            raise ValueError(f"attribute values may be at most {MAX_ATTRIBUTE_VALUE_CHARS} characters (key {key!r})")
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"attribute values must be finite numbers (key {key!r})")
    return value


def no_nul(value: str | None) -> str | None:
    # Postgres stores no NUL in text: refused here, as metadata's are, rather than failing the write.
    if value is not None and "\x00" in value:
        raise ValueError("the text may not contain the NUL character (\\u0000)")
    return value


FileId = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(no_nul)]


class StaticChunking(BaseModel):
    max_chunk_size_tokens: int = Field(ge=100, le=4096)
    chunk_overlap_tokens: int = Field(ge=0)


class ChunkingStrategyParam(BaseModel):
    type: Literal["auto", "static"]
    static: StaticChunking | None = None


class ExpiresAfter(BaseModel):
    anchor: Literal["last_active_at"]
    days: int = Field(ge=1, le=365)


class CreateVectorStoreRequest(BaseModel):
    name: Annotated[str | None, AfterValidator(no_nul)] = Field(None, max_length=256)
    description: Annotated[str | None, AfterValidator(no_nul)] = Field(None, max_length=512)
    file_ids: list[FileId] | None = Field(None, max_length=MAX_BATCH_FILES)
    chunking_strategy: ChunkingStrategyParam | None = None
    expires_after: ExpiresAfter | None = None
    metadata: dict[str, str] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_metadata(value)


class UpdateVectorStoreRequest(BaseModel):
    name: Annotated[str | None, AfterValidator(no_nul)] = Field(None, max_length=256)
    expires_after: ExpiresAfter | None = None
    metadata: dict[str, str] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_metadata(value)


class HybridSearch(BaseModel):
    embedding_weight: float = Field(ge=0)
    text_weight: float = Field(ge=0)


class RankingOptionsParam(BaseModel):
    ranker: Literal["none", "auto", "default-2024-11-15"] = "auto"
    score_threshold: float = Field(0.0, ge=0, le=1)
    # NOTE: the file_search tool's option; vector_stores.search takes it too, so that both rank alike.
    hybrid_search: HybridSearch | None = None


class SearchVectorStoreRequest(BaseModel):
    query: str | list[str]
    filters: dict[str, Any] | None = None
    max_num_results: int = Field(10, ge=1, le=50)
    ranking_options: RankingOptionsParam | None = None
    rewrite_query: bool = False

    @field_validator("query")
    @classmethod
    def _some_query(cls, value: str | list[str]) -> str | list[str]:
        queries = [value] if isinstance(value, str) else value
        if not queries or not all(query.strip() for query in queries):
            raise ValueError("the query must be a non-empty string (or a non-empty list of them)")
        if len(queries) > 10:
            raise ValueError("at most 10 queries are searched at once")
        return value


class FileParam(BaseModel):
    file_id: FileId
    attributes: Attributes | None = None
    chunking_strategy: ChunkingStrategyParam | None = None

    @field_validator("attributes")
    @classmethod
    def _attribute_bounds(cls, value: Attributes | None) -> Attributes | None:
        return check_attributes(value)


class UpdateFileRequest(BaseModel):
    attributes: Attributes | None

    @field_validator("attributes")
    @classmethod
    def _attribute_bounds(cls, value: Attributes | None) -> Attributes | None:
        return check_attributes(value)


class CreateFileBatchRequest(BaseModel):
    file_ids: list[FileId] | None = Field(None, max_length=MAX_BATCH_FILES)
    files: list[FileParam] | None = Field(None, max_length=MAX_BATCH_FILES)
    attributes: Attributes | None = None
    chunking_strategy: ChunkingStrategyParam | None = None

    @field_validator("attributes")
    @classmethod
    def _attribute_bounds(cls, value: Attributes | None) -> Attributes | None:
        return check_attributes(value)


class FileCounts(BaseModel):
    cancelled: int = 0
    completed: int = 0
    failed: int = 0
    in_progress: int = 0
    total: int = 0


class VectorStoreObject(BaseModel):
    id: str
    object: Literal["vector_store"] = "vector_store"
    created_at: int
    name: str
    usage_bytes: int
    file_counts: FileCounts
    status: Literal["expired", "in_progress", "completed"]
    expires_after: ExpiresAfter | None = None
    expires_at: int | None = None
    last_active_at: int | None = None
    metadata: dict[str, str] | None = None


class VectorStoreList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VectorStoreObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class VectorStoreDeleted(BaseModel):
    id: str
    object: Literal["vector_store.deleted"] = "vector_store.deleted"
    deleted: bool = True


class StaticChunkingObject(BaseModel):
    type: Literal["static"] = "static"
    static: StaticChunking


class LastError(BaseModel):
    code: Literal["server_error", "unsupported_file", "invalid_file"]
    message: str


class VectorStoreFileObject(BaseModel):
    id: str
    object: Literal["vector_store.file"] = "vector_store.file"
    created_at: int
    usage_bytes: int
    vector_store_id: str
    status: FileStatus
    last_error: LastError | None = None
    attributes: Attributes | None = None
    chunking_strategy: StaticChunkingObject | None = None


class VectorStoreFileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[VectorStoreFileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class VectorStoreFileDeleted(BaseModel):
    id: str
    object: Literal["vector_store.file.deleted"] = "vector_store.file.deleted"
    deleted: bool = True


class VectorStoreFileBatchObject(BaseModel):
    id: str
    object: Literal["vector_store.files_batch"] = "vector_store.files_batch"
    created_at: int
    vector_store_id: str
    status: FileStatus
    file_counts: FileCounts


class TextContent(BaseModel):
    type: Literal["text"] = "text"
    text: str


class SearchResult(BaseModel):
    file_id: str
    filename: str
    score: float
    attributes: Attributes | None = None
    content: list[TextContent]


class SearchResultsPage(BaseModel):
    object: Literal["vector_store.search_results.page"] = "vector_store.search_results.page"
    search_query: str | list[str]
    data: list[SearchResult]
    has_more: bool = False
    next_page: str | None = None


class FileContentPage(BaseModel):
    object: Literal["vector_store.file_content.page"] = "vector_store.file_content.page"
    data: list[TextContent]
    has_more: bool = False
    next_page: str | None = None
