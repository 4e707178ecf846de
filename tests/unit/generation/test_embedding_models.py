"""Embedding models' declarations: a models file's [[embedding_models]] and RESPONSES_EMBEDDING_MODELS, each refusal
one line naming the entry; and the model new vector stores use."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings
from app.generation.embeddings.models import load_embedding_models, vector_store_model
from app.generation.registry import ModelConfigError
from app.generation.registry_loading import load_registry


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    path = tmp_path / "embed.gguf"
    path.write_bytes(b"GGUF")
    (tmp_path / "chat.gguf").write_bytes(b"GGUF")
    return path


def test_a_models_file_and_the_setting_declare_them(tmp_path: Path, weights: Path) -> None:
    models_file = tmp_path / "models.toml"
    models_file.write_text(
        '[[models]]\nid = "chat"\npath = "chat.gguf"\n\n'
        '[[embedding_models]]\nid = "nomic"\npath = "embed.gguf"\npooling = "mean"\nmatryoshka = true\nn_ctx = 512\n'
    )
    settings = Settings(_env_file=None, models_file=models_file, embedding_models=f"other={weights}")
    registry = load_registry(settings)
    models = load_embedding_models(settings, registry.ids)
    assert models.ids == ["nomic", "other"] and registry.ids == ["chat"]
    nomic = models.get("nomic")
    assert nomic is not None and nomic.path == weights and nomic.matryoshka and nomic.n_ctx == 512
    assert vector_store_model(settings, models) == "nomic"
    chosen = Settings(_env_file=None, embedding_models=f"other={weights}", vector_store_embedding_model="none")
    assert vector_store_model(chosen, load_embedding_models(chosen)) is None
    assert vector_store_model(Settings(_env_file=None), load_embedding_models(Settings(_env_file=None))) is None


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"embedding_models": "e=/nowhere.gguf"}, "not found"),
        ({"embedding_models": "novalue"}, "is not id=path"),
        ({"embedding_models": "bad id=WEIGHTS"}, "may hold only"),
        ({"embedding_models": "e=WEIGHTS,e=WEIGHTS"}, "declared twice"),
        ({"embedding_models": "chat=WEIGHTS"}, "id of a served model"),
        ({"embedding_models": "e=WEIGHTS", "vector_store_embedding_model": "f"}, "not a declared embedding model"),
    ],
)
def test_refusals_name_the_entry(weights: Path, values: dict[str, str], says: str) -> None:
    settings = Settings(
        _env_file=None, **{key: value.replace("WEIGHTS", str(weights)) for key, value in values.items()}
    )
    with pytest.raises(ModelConfigError, match=says):
        load_embedding_models(settings, ["chat"])


def test_a_bad_models_file_entry_is_named(tmp_path: Path, weights: Path) -> None:
    models_file = tmp_path / "models.toml"
    models_file.write_text(
        '[[models]]\nid = "chat"\npath = "chat.gguf"\n\n'
        '[[embedding_models]]\nid = "e"\npath = "embed.gguf"\npooling = "max"\n'
    )
    with pytest.raises(ModelConfigError, match=r"embedding_models\[0\]: pooling"):
        load_embedding_models(Settings(_env_file=None, models_file=models_file))
