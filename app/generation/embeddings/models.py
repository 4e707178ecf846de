"""Embedding models' declarations: RESPONSES_EMBEDDING_MODELS and a models file's [[embedding_models]] entries,
checked as the served models are (one line naming the entry), and the registry requests name them by."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.config import Settings
from app.generation.registry import ModelConfigError
from app.generation.registry_loading import MODEL_ID, parse_models_file

#: How the model's per-token outputs make one vector; None: the model's own (mean where it declares none).
Pooling = Literal["mean", "cls", "last"]
#: The context an embedding model reads when none is declared (its trained one when smaller): each input is
#: truncated to it, and llama.cpp reads it in one batch.
DEFAULT_EMBEDDING_CTX = 2048


@dataclass(frozen=True, slots=True)
class EmbeddingModelSpec:
    id: str
    path: Path
    #: Tokens an input is truncated to; None: DEFAULT_EMBEDDING_CTX (or the model's trained context if smaller).
    n_ctx: int | None = None
    pooling: Pooling | None = None
    #: Whether a vector's first `dimensions` values are a vector of their own (Matryoshka training, as
    #: text-embedding-3's): only then may a request ask for fewer dimensions.
    matryoshka: bool = False
    n_gpu_layers: int | None = None


class _FileEmbeddingModel(BaseModel):
    """One [[embedding_models]] entry of a models file."""

    model_config = ConfigDict(extra="forbid")

    id: str
    path: Path
    n_ctx: int | None = Field(None, ge=8)
    pooling: Pooling | None = None
    matryoshka: bool = False
    n_gpu_layers: int | None = Field(None, ge=-1)


class EmbeddingModels:
    """The declared embedding models by id (there may be none)."""

    def __init__(self, models: Sequence[EmbeddingModelSpec] = ()) -> None:
        self._models: dict[str, EmbeddingModelSpec] = {}
        for spec in models:
            if spec.id in self._models:
                raise ModelConfigError(f"embedding model '{spec.id}' is declared twice (model ids must be unique)")
            self._models[spec.id] = spec

    def get(self, name: str) -> EmbeddingModelSpec | None:
        return self._models.get(name)

    @property
    def ids(self) -> list[str]:
        return list(self._models)

    def __iter__(self) -> Iterator[EmbeddingModelSpec]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)


def _spec(settings: Settings, model_id: str, path: Path, where: str, **declared: object) -> EmbeddingModelSpec:
    if not MODEL_ID.match(model_id):
        raise ModelConfigError(f"{where}: model id {model_id!r} may hold only letters, digits and . _ : / @ + -")
    if not path.is_file():
        raise ModelConfigError(f"{where}: model file {path} not found")
    values = {key: value for key, value in declared.items() if value is not None}
    values.setdefault("n_gpu_layers", settings.n_gpu_layers)
    return EmbeddingModelSpec(id=model_id, path=path, **values)  # type: ignore[arg-type]


def _from_file(settings: Settings, path: Path) -> list[EmbeddingModelSpec]:
    entries = parse_models_file(path).get("embedding_models") or []
    if not isinstance(entries, list):
        raise ModelConfigError(f"models file {path}: embedding_models must be a list of entries")
    specs = []
    for index, entry in enumerate(entries):
        try:
            parsed = _FileEmbeddingModel.model_validate(entry)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise ModelConfigError(f"models file {path}, embedding_models[{index}]: {field}: {first['msg']}") from None
        where = f"models file {path}, embedding model {parsed.id!r}"
        file = parsed.path if parsed.path.is_absolute() else path.parent / parsed.path
        specs.append(_spec(settings, parsed.id, file, where, **parsed.model_dump(exclude={"id", "path"})))
    return specs


def load_embedding_models(settings: Settings, served: Sequence[str] = ()) -> EmbeddingModels:
    """Every declared embedding model: the models file's, then RESPONSES_EMBEDDING_MODELS'. `served`: the
    generation models' ids, which an embedding model may not reuse (a request names one or the other)."""
    specs = _from_file(settings, settings.models_file) if settings.models_file is not None else []
    for part in (part.strip() for part in (settings.embedding_models or "").split(",")):
        if not part:
            continue
        model_id, separator, file = part.partition("=")
        if not separator or not model_id.strip() or not file.strip():
            raise ModelConfigError(f"RESPONSES_EMBEDDING_MODELS: {part!r} is not id=path")
        where = f"RESPONSES_EMBEDDING_MODELS entry {model_id.strip()!r}"
        specs.append(_spec(settings, model_id.strip(), Path(file.strip()), where))
    for spec in specs:
        if spec.id in served:
            raise ModelConfigError(f"embedding model '{spec.id}' has the id of a served model (ids must be unique)")
    models = EmbeddingModels(specs)
    chosen = settings.vector_store_embedding_model
    if chosen and chosen != "none" and models.get(chosen) is None:
        raise ModelConfigError(f"RESPONSES_VECTOR_STORE_EMBEDDING_MODEL: '{chosen}' is not a declared embedding model")
    return models


def vector_store_model(settings: Settings, models: EmbeddingModels) -> str | None:
    """The embedding model new vector stores use: the one set, else the first declared; None: lexical only."""
    chosen = settings.vector_store_embedding_model
    if chosen == "none":
        return None
    if chosen:
        return chosen
    return models.ids[0] if len(models) else None
