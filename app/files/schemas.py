"""The Files API's wire format, named and shaped as the SDK's FileObject, FileDeleted and its cursor page."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

#: What a file is for: uploaded for a batch, written by one (its output and error files), or uploaded for vector
#: stores ("assistants", as the SDK's vector_stores.files.upload sends, or "user_data").
FilePurpose = Literal["batch", "batch_output", "assistants", "user_data"]
#: The purpose of the files a batch writes.
OUTPUT_PURPOSE = "batch_output"
#: The purposes an upload may name today.
UPLOAD_PURPOSES = ("batch", "assistants", "user_data")


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: FilePurpose
    # NOTE: deprecated in the hosted API, still in the SDK's type: a stored file is always "processed".
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True
