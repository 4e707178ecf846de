"""Settings -> a ModelRegistry: a models file (TOML, or YAML where pyyaml is installed), RESPONSES_MODELS, a
directory of GGUF files, and the single-model settings (the one-model case; the shipped SmolLM2 when nothing
is set). Every refusal is a ModelConfigError of one line naming the entry."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.config import ModelNotFoundError, Settings
from app.generation.dialects.detection import UnknownFormat, check_formats
from app.generation.registry import OWNED_BY, ModelConfigError, ModelRegistry, ModelSpec

#: Ids travel in URLs, Redis keys and queue names: no spaces, and none of the lists' separators (',' '=').
MODEL_ID = re.compile(r"^[\w.:/@+-]+$")


class _FileModel(BaseModel):
    """One `[[models]]` entry of a models file."""

    model_config = ConfigDict(extra="forbid")

    id: str
    path: Path
    n_ctx: int | None = Field(None, ge=0)
    chat_template: str | None = None
    reasoning_tags: str | None = None
    tool_format: str | None = None
    reasoning_format: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_output_tokens: int | None = Field(None, ge=16)
    n_gpu_layers: int | None = Field(None, ge=-1)
    owned_by: str | None = None
    created: int | None = Field(None, ge=0)


class _ModelsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: str | None = None
    aliases: dict[str, str] = Field(default_factory=dict)
    models: list[_FileModel] = Field(default_factory=list)
    #: Embedding models, checked by app/generation/embeddings/models.py.
    embedding_models: list[Any] = Field(default_factory=list)


def _check_id(model_id: str, where: str) -> str:
    if not MODEL_ID.match(model_id):
        raise ModelConfigError(f"{where}: model id {model_id!r} may hold only letters, digits and . _ : / @ + -")
    return model_id


def _check_file(path: Path, where: str) -> Path:
    if not path.is_file():
        raise ModelConfigError(f"{where}: model file {path} not found")
    return path


def _spec(settings: Settings, model_id: str, path: Path, where: str, **declared: Any) -> ModelSpec:
    """A model with the deployment-wide settings where its declaration gives none."""
    path = _check_file(path, where)
    values = {key: value for key, value in declared.items() if value is not None}
    try:
        check_formats(values.get("tool_format"), values.get("reasoning_format"))
    except UnknownFormat as error:
        raise ModelConfigError(f"{where}: {error}") from None
    return ModelSpec(
        id=_check_id(model_id, where),
        path=path,
        n_ctx=values.pop("n_ctx", settings.n_ctx),
        kv_pool_tokens=settings.kv_pool_tokens if settings.kv_reuse != "exact" else 0,
        reasoning_tags=values.pop("reasoning_tags", settings.reasoning_tags),
        n_gpu_layers=values.pop("n_gpu_layers", settings.n_gpu_layers),
        owned_by=values.pop("owned_by", OWNED_BY),
        created=values.pop("created", int(path.stat().st_mtime)),
        **values,
    )


def parse_models_file(path: Path) -> dict[str, Any]:
    """A models file's top-level table, parsed (TOML, or YAML by its suffix)."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ModelConfigError(f"models file {path}: {error.strerror or error}") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ModelConfigError(f"models file {path}: YAML needs pyyaml installed (or write it as TOML)") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ModelConfigError(f"models file {path} does not parse: {' '.join(str(error).split())}") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ModelConfigError(f"models file {path} does not parse: {error}") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"models file {path}: expected a table with a `models` list")
    return data


def _read_models_file(settings: Settings, path: Path) -> tuple[list[ModelSpec], str | None, dict[str, str]]:
    data = parse_models_file(path)
    try:
        parsed = _ModelsFile.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        location = list(first["loc"])
        where = f"models file {path}"
        if len(location) >= 2 and location[0] == "models" and isinstance(location[1], int):
            entry = data["models"][location[1]]
            name = entry.get("id") if isinstance(entry, dict) else None
            where += f", model {name!r}" if name else f", models[{location[1]}]"
            location = location[2:]
        field = ".".join(str(part) for part in location)
        raise ModelConfigError(f"{where}: {field + ': ' if field else ''}{first['msg']}") from None
    if not parsed.models:
        # Refused: the shipped model, served in its place, is not what the operator declared.
        raise ModelConfigError(f"models file {path} declares no models (add a [[models]] entry with id and path)")
    specs = [
        _spec(
            settings,
            entry.id,
            entry.path if entry.path.is_absolute() else path.parent / entry.path,
            f"models file {path}, model {entry.id!r}",
            **entry.model_dump(exclude={"id", "path"}),
        )
        for entry in parsed.models
    ]
    return specs, parsed.default, parsed.aliases


def _pairs(setting: str, value: str) -> list[tuple[str, str]]:
    """'a=x,b=y' -> [(a, x), (b, y)]."""
    pairs = []
    for part in (part.strip() for part in value.split(",")):
        if not part:
            continue
        name, separator, target = part.partition("=")
        if not separator or not name.strip() or not target.strip():
            raise ModelConfigError(f"{setting}: {part!r} is not name=value")
        pairs.append((name.strip(), target.strip()))
    return pairs


def _single_model(settings: Settings) -> ModelSpec:
    """The single-model settings (RESPONSES_MODEL_PATH, RESPONSES_MODEL_ID...): the one-model case."""
    try:
        path = settings.resolved_model_path
    except ModelNotFoundError as error:
        raise ModelConfigError(str(error)) from None
    return _spec(settings, settings.served_model_id, path, "RESPONSES_MODEL_PATH")


def load_registry(settings: Settings) -> ModelRegistry:
    """Every declared model, in this order: the models file, RESPONSES_MODELS, RESPONSES_MODELS_DIR, then
    RESPONSES_MODEL_PATH where it is set (or the shipped model when nothing at all is declared)."""
    specs: list[ModelSpec] = []
    default, aliases = settings.default_model, dict[str, str]()
    if settings.models_file is not None:
        specs, file_default, aliases = _read_models_file(settings, settings.models_file)
        default = default or file_default
    if settings.models:
        for model_id, file in _pairs("RESPONSES_MODELS", settings.models):
            specs.append(_spec(settings, model_id, Path(file), f"RESPONSES_MODELS entry {model_id!r}"))
    if settings.models_dir is not None:
        if not settings.models_dir.is_dir():
            raise ModelConfigError(f"RESPONSES_MODELS_DIR: {settings.models_dir} is not a directory")
        for path in sorted(settings.models_dir.glob("*.gguf")):
            specs.append(_spec(settings, path.stem, path, f"RESPONSES_MODELS_DIR file {path.name!r}"))
    if settings.model_path is not None or not specs:
        specs.append(_single_model(settings))
    if settings.model_aliases:
        aliases = {**aliases, **dict(_pairs("RESPONSES_MODEL_ALIASES", settings.model_aliases))}
    return ModelRegistry(specs, default=default, aliases=aliases)
