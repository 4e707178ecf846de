"""ORM models, one table a module; importing this package registers them all on Base.metadata."""

from app.db.models.input_item import InputItemRow
from app.db.models.response import ResponseRow
from app.db.models.response_event import ResponseEventRow

__all__ = ["InputItemRow", "ResponseEventRow", "ResponseRow"]
