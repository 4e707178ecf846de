"""A batch's output and error files, written from its settled lines in the hosted line format
(`{id, custom_id, response: {status_code, request_id, body}, error}`), a page of lines at a time, in the caller's
unit of work (the one that also ends the batch: the files exist exactly when the batch says so)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.batches import repository
from app.batches.schemas import LineError, LineResponse, OutputLine
from app.db.models import BatchLineRow, BatchRow
from app.files.schemas import OUTPUT_PURPOSE
from app.files.storage import FileWriter

#: Lines read at once while the files are written.
LINES_PER_PAGE = 200


def output_line(line: BatchLineRow) -> OutputLine:
    response = None
    if line.status_code is not None:
        response = LineResponse(status_code=line.status_code, request_id=line.response_id, body=line.result or {})
    error = LineError.model_validate(line.error) if line.error is not None else None
    return OutputLine(id=line.id, custom_id=line.custom_id, response=response, error=error)


async def write_result_files(session: AsyncSession, batch: BatchRow) -> tuple[str | None, str | None]:
    """(output_file_id, error_file_id): the lines answered 200 in one, every other in the other; a file only
    where it has lines, as hosted. The lines are deleted then (the caller's unit of work ends the batch)."""
    output = FileWriter(session, tenant=batch.tenant, purpose=OUTPUT_PURPOSE, filename=f"{batch.id}_output.jsonl")
    errors = FileWriter(session, tenant=batch.tenant, purpose=OUTPUT_PURPOSE, filename=f"{batch.id}_error.jsonl")
    after = 0
    while lines := await repository.done_lines(session, batch.id, after_line=after, limit=LINES_PER_PAGE):
        for line in lines:
            writer = output if line.status_code == 200 else errors
            await writer.write(output_line(line).model_dump_json().encode() + b"\n")
        after = lines[-1].line
    output_id = (await output.close()).id if output.row.bytes else None
    error_id = (await errors.close()).id if errors.row.bytes else None
    # Written: the lines' results are kept once, in the files (a batch's requests are not stored twice).
    await repository.delete_lines(session, batch.id)
    return output_id, error_id
