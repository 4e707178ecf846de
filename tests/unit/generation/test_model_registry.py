"""The model registry from settings: a models file, RESPONSES_MODELS, a models directory, the single-model
settings; and the one-line refusals of declarations that cannot be served."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from app.config import Settings
from app.generation.registry import ModelConfigError, ModelRegistry, ModelSpec
from app.generation.registry_loading import load_registry


def gguf(directory: Path, name: str) -> Path:
    path = directory / name
    path.write_bytes(b"GGUF")
    return path


def settings_of(tmp_path: Path, **values: object) -> Settings:
    return Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", _env_file=None, **values)  # type: ignore[arg-type]


def test_a_models_file_declares_models_defaults_and_aliases(tmp_path: Path) -> None:
    gguf(tmp_path, "small.gguf")
    gguf(tmp_path, "big.gguf")
    models_file = tmp_path / "models.toml"
    models_file.write_text(
        """
default = "big"
[aliases]
"gpt-4o" = "small"

[[models]]
id = "small"
path = "small.gguf"
n_ctx = 2048
temperature = 0.2
top_p = 0.9
max_output_tokens = 64
chat_template = "{{ messages }}"
reasoning_tags = "none"
n_gpu_layers = 0
owned_by = "me"
created = 1700000000

[[models]]
id = "big"
path = "big.gguf"
"""
    )
    registry = load_registry(settings_of(tmp_path, models_file=models_file, n_ctx=4096))
    assert registry.ids == ["small", "big"] and registry.default.id == "big"
    small = registry.get("gpt-4o")
    assert small is not None and small.id == "small" and small.path == tmp_path / "small.gguf"
    assert (small.n_ctx, small.temperature, small.top_p, small.max_output_tokens) == (2048, 0.2, 0.9, 64)
    assert (small.chat_template, small.reasoning_tags, small.n_gpu_layers) == ("{{ messages }}", "none", 0)
    assert (small.owned_by, small.created) == ("me", 1700000000)
    big = registry.get("big")
    assert big is not None and big.n_ctx == 4096, "the deployment-wide setting where the entry gives none"
    assert big.owned_by == "llama-responses" and big.created > 0
    # A worker's --model names: ids or aliases, each model once; none named: every model.
    assert registry.resolve(["big", "gpt-4o", "small"]) == ["big", "small"] and registry.resolve([]) == registry.ids


def test_models_setting_directory_and_aliases_setting(tmp_path: Path) -> None:
    a = gguf(tmp_path, "a.gguf")
    directory = tmp_path / "dir"
    directory.mkdir()
    gguf(directory, "Qwen3-0.6B.gguf")
    gguf(directory, "notes.txt")
    registry = load_registry(
        settings_of(
            tmp_path,
            models=f"first={a}, second={a}",
            models_dir=directory,
            default_model="second",
            model_aliases="gpt-5=Qwen3-0.6B",
        )
    )
    assert registry.ids == ["first", "second", "Qwen3-0.6B"]
    assert registry.default.id == "second"
    alias = registry.get("gpt-5")
    assert alias is not None and alias.id == "Qwen3-0.6B"
    assert registry.get("gpt-4o") is None


def test_single_model_settings_are_the_one_model_case(tmp_path: Path) -> None:
    path = gguf(tmp_path, "mine.gguf")
    registry = load_registry(settings_of(tmp_path, model_path=path, n_ctx=512))
    assert registry.ids == ["mine"] and registry.default.n_ctx == 512
    named = load_registry(settings_of(tmp_path, model_path=path, model_id="local"))
    assert named.ids == ["local"]
    shipped = load_registry(settings_of(tmp_path))
    assert shipped.ids == ["SmolLM2-135M-Instruct.Q4_1"], "the shipped model with no settings at all"


def test_the_kv_pool_reaches_every_model_unless_reuse_is_exact(tmp_path: Path) -> None:
    path = gguf(tmp_path, "mine.gguf")
    assert load_registry(settings_of(tmp_path, model_path=path)).default.kv_pool_tokens == 0
    pooled = load_registry(settings_of(tmp_path, model_path=path, kv_pool_tokens=4096))
    assert pooled.default.kv_pool_tokens == 4096
    exact = load_registry(settings_of(tmp_path, model_path=path, kv_pool_tokens=4096, kv_reuse="exact"))
    assert exact.default.kv_pool_tokens == 0, "exact reuse keeps a window per sequence: no pool bounds a prompt"


@pytest.mark.parametrize(
    ("file_text", "values", "message"),
    [
        ("[[models]\nid = 1", {}, "does not parse"),
        ("models = []", {}, "models.toml declares no models"),
        ("", {}, "models.toml declares no models"),
        ('[[models]]\nid = "a"\npath = "missing.gguf"', {}, "model 'a': model file"),
        ('[[models]]\nid = "a"\npath = "a.gguf"\ncolour = "red"', {}, "model 'a': colour: Extra inputs"),
        ('[[models]]\nid = "a"\npath = "a.gguf"\ntemperature = 9', {}, "model 'a': temperature"),
        ('[[models]]\nid = "a"\npath = "a.gguf"\n[[models]]\nid = "a"\npath = "a.gguf"', {}, "'a' is declared twice"),
        ('[[models]]\nid = "a"\npath = "a.gguf"', {"models": "a=a.gguf"}, "'a' is declared twice"),
        ('[[models]]\nid = "a b"\npath = "a.gguf"', {}, "model id 'a b'"),
        ('[[models]]\nid = "a"\npath = "a.gguf"', {"default_model": "b"}, "default model 'b'"),
        ('[[models]]\nid = "a"\npath = "a.gguf"', {"model_aliases": "x=b"}, "alias 'x' names model 'b'"),
        ('[[models]]\nid = "a"\npath = "a.gguf"', {"models": "b"}, "RESPONSES_MODELS: 'b' is not name=value"),
    ],
)
def test_declarations_that_cannot_be_served_are_refused_in_one_line(
    tmp_path: Path, file_text: str, values: dict[str, object], message: str
) -> None:
    gguf(tmp_path, "a.gguf")
    (tmp_path / "models.toml").write_text(file_text)
    if "models" in values:
        values = {**values, "models": str(values["models"]).replace("a.gguf", str(tmp_path / "a.gguf"))}
    with pytest.raises(ModelConfigError) as error:
        load_registry(settings_of(tmp_path, models_file=tmp_path / "models.toml", **values))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_empty_registry_and_an_alias_hiding_a_model_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="no models"):
        ModelRegistry([])
    spec = ModelSpec(id="a", path=gguf(tmp_path, "a.gguf"))
    with pytest.raises(ModelConfigError, match="alias 'a' is also a model id"):
        ModelRegistry([spec, ModelSpec(id="b", path=spec.path)], aliases={"a": "b"})


def test_the_cli_refuses_to_start_with_the_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RESPONSES_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.setenv("RESPONSES_MODELS", f"a={tmp_path / 'gone.gguf'}")
    assert main(["serve"]) == 2
    assert (
        capsys.readouterr().err
        == f"llama-responses: RESPONSES_MODELS entry 'a': model file {tmp_path / 'gone.gguf'} not found\n"
    )
    monkeypatch.setenv("RESPONSES_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("RESPONSES_MODELS", f"a={gguf(tmp_path, 'a.gguf')}")
    assert main(["worker", "--model", "b"]) == 2
    assert capsys.readouterr().err == "llama-responses: worker model 'b' is not declared (served: a)\n"


def test_a_yaml_models_file_reads_as_the_toml_one(tmp_path: Path) -> None:
    gguf(tmp_path, "a.gguf")
    (tmp_path / "models.yaml").write_text("aliases: {gpt-4o: a}\nmodels:\n  - {id: a, path: a.gguf, n_ctx: 256}\n")
    registry = load_registry(settings_of(tmp_path, models_file=tmp_path / "models.yaml"))
    alias = registry.get("gpt-4o")
    assert registry.ids == ["a"] and alias is not None and alias.n_ctx == 256
    (tmp_path / "models.yaml").write_text("models: [")
    with pytest.raises(ModelConfigError, match="does not parse"):
        load_registry(settings_of(tmp_path, models_file=tmp_path / "models.yaml"))


def test_a_models_file_names_a_model_s_family_and_its_reasoning(tmp_path: Path) -> None:
    models_file = tmp_path / "models.toml"
    path = gguf(tmp_path, "a.gguf")
    models_file.write_text(
        f'[[models]]\nid = "oss"\npath = "{path}"\ntool_format = "harmony"\nreasoning_format = "none"\n'
    )
    (spec,) = load_registry(settings_of(tmp_path, models_file=models_file))
    assert (spec.tool_format, spec.reasoning_format) == ("harmony", "none")
    models_file.write_text(f'[[models]]\nid = "oss"\npath = "{path}"\ntool_format = "openai"\n')
    with pytest.raises(ModelConfigError, match=r"model 'oss': tool_format 'openai' is none of: .*harmony"):
        load_registry(settings_of(tmp_path, models_file=models_file))
    models_file.write_text(f'[[models]]\nid = "oss"\npath = "{path}"\nreasoning_format = "deep"\n')
    with pytest.raises(ModelConfigError, match="reasoning_format 'deep'"):
        load_registry(settings_of(tmp_path, models_file=models_file))
