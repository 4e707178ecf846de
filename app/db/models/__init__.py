"""ORM models, one table a module; importing this package registers them all on Base.metadata."""

from app.db.models.api_key import ApiKeyRow
from app.db.models.batch import BatchRow
from app.db.models.batch_line import BatchLineRow
from app.db.models.conversation import ConversationRow
from app.db.models.conversation_item import ConversationItemRow
from app.db.models.file_chunk import FileChunkRow
from app.db.models.generation_progress import GenerationProgressRow
from app.db.models.input_item import InputItemRow
from app.db.models.metering.tenant_storage import TenantStorageRow
from app.db.models.metering.usage_day import UsageDayRow
from app.db.models.output_item import OutputItemRow
from app.db.models.project import ProjectRow
from app.db.models.requests.idempotency_key import IdempotencyKeyRow
from app.db.models.response import ResponseRow
from app.db.models.response_event import ResponseEventRow
from app.db.models.server_secret import ServerSecretRow
from app.db.models.stored_file import FileRow
from app.db.models.vector_stores.chunk import VectorStoreChunkRow
from app.db.models.vector_stores.file_batch import VectorStoreFileBatchRow
from app.db.models.vector_stores.store import VectorStoreRow
from app.db.models.vector_stores.store_file import VectorStoreFileRow
from app.db.models.webhook_delivery import WebhookDeliveryRow
from app.db.models.webhook_endpoint import WebhookEndpointRow

__all__ = [
    "ApiKeyRow",
    "BatchLineRow",
    "BatchRow",
    "ConversationItemRow",
    "ConversationRow",
    "FileChunkRow",
    "FileRow",
    "GenerationProgressRow",
    "IdempotencyKeyRow",
    "InputItemRow",
    "OutputItemRow",
    "ProjectRow",
    "ResponseEventRow",
    "ResponseRow",
    "ServerSecretRow",
    "TenantStorageRow",
    "UsageDayRow",
    "VectorStoreChunkRow",
    "VectorStoreFileBatchRow",
    "VectorStoreFileRow",
    "VectorStoreRow",
    "WebhookDeliveryRow",
    "WebhookEndpointRow",
]
