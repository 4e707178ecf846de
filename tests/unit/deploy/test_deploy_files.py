"""The compose file and k8s manifests, read as a reviewer would (no Docker engine here): they parse, run our
own CLI's subcommands, and set only settings that exist."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import build_parser
from app.config import Settings
from app.generation.registry_loading import load_registry

ROOT = Path(__file__).resolve().parents[3]
SUBCOMMANDS = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
SETTINGS = {f"RESPONSES_{name.upper()}" for name in Settings.model_fields}


def check_container(command: list[str], env_names: set[str]) -> None:
    assert command[0] == "llama-responses" and command[1] in SUBCOMMANDS, command
    build_parser().parse_args(command[1:])  # every option exists (argparse exits on one that does not)
    build_parser().parse_args(command[1:])  # its options exist
    assert env_names <= SETTINGS, env_names - SETTINGS


def test_the_models_file_example_declares_what_the_readme_says(tmp_path: Path) -> None:
    example = (ROOT / "deploy/models.example.toml").read_text()
    for name in ("SmolLM2-135M-Instruct.Q4_1.gguf", "Qwen3-8B-Q4_K_M.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
        example = example.replace(f"/models/{name}", name)
    (tmp_path / "models.toml").write_text(example)
    registry = load_registry(Settings(models_file=tmp_path / "models.toml", _env_file=None))
    assert registry.ids == ["small", "big"] and registry.default.id == "small"
    assert registry.aliases == {"gpt-4o-mini": "small", "gpt-4o": "big"}
    big = registry.get("gpt-4o")
    assert big is not None and big.n_gpu_layers == -1 and big.reasoning_tags == "<think>,</think>"


def test_compose_services_run_our_cli_with_real_settings() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "api", "worker"} <= set(services)
    for name in ("migrate", "api", "worker"):
        service = services[name]
        check_container(service["command"], set(service["environment"]))
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["worker"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "RESPONSES_REDIS_URL" in services["worker"]["environment"]
    for name in ("postgres", "redis", "api", "worker"):  # a crashed process comes back without an operator
        assert services[name]["restart"] in ("always", "unless-stopped"), name


def k8s_documents() -> list[dict[str, Any]]:
    return [
        doc for path in sorted((ROOT / "deploy/k8s").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
    ]


def test_k8s_manifests_have_what_the_issue_asks() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in k8s_documents()}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "Job", "ConfigMap", "Secret"} <= {
        kind for kind, _ in kinds
    }
    config = {
        key
        for doc in k8s_documents()
        if doc["kind"] in ("ConfigMap", "Secret")
        for key in {**doc.get("data", {}), **doc.get("stringData", {})}
    }
    assert config <= SETTINGS


@pytest.mark.parametrize(
    "doc", [d for d in k8s_documents() if d["kind"] in ("Deployment", "Job")], ids=lambda d: d["metadata"]["name"]
)
def test_k8s_containers_run_our_cli(doc: dict[str, Any]) -> None:
    for container in doc["spec"]["template"]["spec"]["containers"]:
        check_container(container["command"], set())
        if container["command"][1] == "worker":
            assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
