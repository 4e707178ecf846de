"""The code's layout, as docs/development/layout.md draws it: no import cycle between modules (TYPE_CHECKING
imports included) or packages, each package importing only what its paragraph there allows, small folders and
modules, llama.cpp behind app/generation, and bench/ free of tests/."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYOUT_PAGE = ROOT / "docs" / "development" / "layout.md"
MAX_FOLDER_MODULES = 16
MAX_MODULE_LINES = 500

#: What each package (or top-level module) of app/ and worker/ may import of the others: the layout page's
#: paragraphs, one for one. app/main, app/cli and app/testing compose everything and may import any of them.
ALLOWED: dict[str, set[str]] = {
    "app.config": set(),
    "app.errors": set(),
    "app.ids": set(),
    "app.observability": {"app.ids"},
    "app.db": {"app.config", "app.observability"},
    "app.schemas": {"app.config", "app.errors"},
    "app.generation": {"app.config", "app.observability"},
    "app.events": {"app.schemas", "app.generation", "app.ids"},
    "app.prompt_cache": {"app.generation"},
    "app.secrets": {"app.config", "app.db"},
    "app.tenants": {"app.config", "app.errors"},
    "app.limits": {"app.errors"},
    "app.read_cache": set(),
    "app.transport": {"app.config", "app.generation", "app.events"},
    "app.items": {"app.db", "app.errors", "app.generation", "app.ids", "app.schemas", "app.secrets"},
    "app.runtime": {
        "app.config",
        "app.db",
        "app.generation",
        "app.limits",
        "app.read_cache",
        "app.secrets",
        "app.tenants",
        "app.transport",
    },
    "app.outbound": set(),
    "app.idempotency": {"app.db", "app.errors", "app.ids", "app.runtime", "app.secrets"},
    "app.mcp": {
        "app.config",
        "app.db",
        "app.errors",
        "app.events",
        "app.generation",
        "app.outbound",
        "app.schemas",
        "app.secrets",
    },
    "app.api": {
        "app.config",
        "app.errors",
        "app.events",
        "app.items",
        "app.observability",
        "app.runtime",
        "app.schemas",
        "app.tenants",
    },
    "app.conversations": {
        "app.api",
        "app.db",
        "app.errors",
        "app.events",
        "app.generation",
        "app.idempotency",
        "app.ids",
        "app.items",
        "app.mcp",
        "app.quotas",
        "app.runtime",
        "app.schemas",
    },
    "app.webhooks": {
        "app.api",
        "app.config",
        "app.db",
        "app.errors",
        "app.idempotency",
        "app.ids",
        "app.observability",
        "app.outbound",
        "app.quotas",
        "app.runtime",
        "app.schemas",
        "app.secrets",
    },
    "app.lifecycle": {"app.db"},
    "app.end_effects": {
        "app.conversations",
        "app.items",
        "app.lifecycle",
        "app.prompt_cache",
        "app.usage",
        "app.webhooks",
    },
    "app.jobs": {
        "app.hosted_tools",
        "app.config",
        "app.db",
        "app.errors",
        "app.events",
        "app.generation",
        "app.ids",
        "app.lifecycle",
        "app.mcp",
        "app.observability",
        "app.schemas",
        "app.transport",
    },
    "app.keys": {
        "app.api",
        "app.config",
        "app.db",
        "app.errors",
        "app.idempotency",
        "app.ids",
        "app.limits",
        "app.schemas",
        "app.tenants",
    },
    "app.responses": {
        "app.hosted_tools",
        "app.api",
        "app.config",
        "app.conversations",
        "app.db",
        "app.errors",
        "app.events",
        "app.generation",
        "app.idempotency",
        "app.ids",
        "app.items",
        "app.jobs",
        "app.mcp",
        "app.observability",
        "app.prompt_cache",
        "app.quotas",
        "app.read_cache",
        "app.runtime",
        "app.schemas",
        "app.tenants",
        "app.transport",
    },
    "app.sessions": {
        "app.config",
        "app.db",
        "app.errors",
        "app.events",
        "app.generation",
        "app.ids",
        "app.jobs",
        "app.observability",
        "app.responses",
        "app.runtime",
        "app.schemas",
        "app.tenants",
        "app.transport",
    },
    "app.quotas": {"app.db", "app.errors", "app.runtime"},
    "app.served_models": {"app.api", "app.errors", "app.generation", "app.runtime"},
    "app.files": {
        "app.api",
        "app.db",
        "app.errors",
        "app.idempotency",
        "app.ids",
        "app.quotas",
        "app.runtime",
        "app.schemas",
    },
    "app.batches": {
        "app.api",
        "app.config",
        "app.db",
        "app.errors",
        "app.events",
        "app.files",
        "app.idempotency",
        "app.ids",
        "app.quotas",
        "app.responses",
        "app.runtime",
        "app.schemas",
        "app.webhooks",
    },
    "app.ops": {
        "app.api",
        "app.batches",
        "app.config",
        "app.db",
        "app.errors",
        "app.events",
        "app.files",
        "app.generation",
        "app.idempotency",
        "app.keys",
        "app.observability",
        "app.responses",
        "app.runtime",
        "app.schemas",
        "app.tenants",
        "app.transport",
        "app.usage",
        "app.vector_stores",
        "app.webhooks",
    },
    "app.retrieval": {"app.config", "app.db", "app.files", "app.generation", "app.ids", "app.read_cache"},
    "app.hosted_tools": {
        "app.config",
        "app.db",
        "app.errors",
        "app.events",
        "app.generation",
        "app.outbound",
        "app.read_cache",
        "app.retrieval",
        "app.schemas",
    },
    "app.vector_stores": {
        "app.api",
        "app.db",
        "app.errors",
        "app.files",
        "app.generation",
        "app.ids",
        "app.quotas",
        "app.retrieval",
        "app.runtime",
        "app.schemas",
    },
    "app.embeddings": {"app.api", "app.errors", "app.generation", "app.runtime", "app.schemas"},
    "app.usage": {"app.api", "app.db", "app.errors", "app.keys", "app.quotas", "app.runtime", "app.tenants"},
    "app.console": set(),
    "worker": {
        "app.hosted_tools",
        "app.config",
        "app.db",
        "app.end_effects",
        "app.generation",
        "app.ids",
        "app.jobs",
        "app.keys",
        "app.limits",
        "app.mcp",
        "app.observability",
        "app.ops",
        "app.retrieval",
        "app.secrets",
        "app.transport",
        "app.webhooks",
    },
}
#: Packages that compose the others: they may import any of them (app.cli the worker too); no package of
#: ALLOWED may import them.
COMPOSERS = {"app.main", "app.cli", "app.testing"}


def modules(*tops: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the given top-level folders."""
    found: dict[str, Path] = {}
    for top in tops:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported(name: str, path: Path) -> set[str]:
    """Every module name `path` imports (absolute, relative resolved), wherever the import stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(*tops: str) -> dict[str, set[str]]:
    """Module -> the modules of this project it imports (a name resolved to the longest module it names)."""
    known = modules(*tops)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets: set[str] = set()
        for target in imported(name, path):
            while target and target not in known:
                target = target.rpartition(".")[0]
            # A package's __init__ naming its own modules is not an import of design.
            if target and target != name and not target.startswith(name + "."):
                targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Kosaraju, iteratively)."""
    order: list[str] = []
    seen: set[str] = set()
    for start in graph:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(graph.get(start, ())))]
        while stack:
            node, children = stack[-1]
            child = next((c for c in children if c not in seen), None)
            if child is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(child)
                stack.append((child, iter(graph.get(child, ()))))
    reverse: dict[str, set[str]] = defaultdict(set)
    for node, targets in graph.items():
        for target in targets:
            reverse[target].add(node)
    assigned: set[str] = set()
    components = []
    for node in reversed(order):
        if node in assigned:
            continue
        component, pending = [], [node]
        assigned.add(node)
        while pending:
            current = pending.pop()
            component.append(current)
            for source in reverse[current] - assigned:
                assigned.add(source)
                pending.append(source)
        if len(component) > 1:
            components.append(sorted(component))
    return components


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "app" and len(parts) > 1 else parts[0]


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph("app", "worker").items():
        for target in targets:
            if package_of(module) != package_of(target):
                graph[package_of(module)].add(package_of(target))
    return graph


def test_no_module_is_part_of_an_import_cycle() -> None:
    assert cycles(import_graph("app", "worker")) == []


def test_no_package_is_part_of_an_import_cycle() -> None:
    assert cycles(package_graph()) == []


def test_each_package_imports_only_what_the_layout_allows() -> None:
    graph = package_graph()
    assert set(graph) - set(ALLOWED) - COMPOSERS == set(), "a package the layout does not describe"
    wrong = {
        package: sorted(targets - ALLOWED[package])
        for package, targets in graph.items()
        if package in ALLOWED and targets - ALLOWED[package]
    }
    assert wrong == {}, "imports against docs/development/layout.md"


def test_only_the_generation_package_imports_llama_cpp() -> None:
    importers = {
        package_of(name)
        for name, path in modules("app", "worker").items()
        if any(target.split(".")[0] == "llama_cpp" for target in imported(name, path))
    }
    assert importers == {"app.generation"}


def test_folders_and_modules_stay_small() -> None:
    per_folder: dict[Path, int] = defaultdict(int)
    for path in modules("app", "worker").values():
        if path.name != "__init__.py":
            per_folder[path.parent] += 1
        lines = len(path.read_text().splitlines())
        assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it along its jobs"
    crowded = {
        str(folder.relative_to(ROOT)): count for folder, count in per_folder.items() if count > MAX_FOLDER_MODULES
    }
    assert crowded == {}


def test_bench_imports_nothing_from_tests() -> None:
    bench = {name: path for name, path in modules("bench").items()}
    leaks = {
        name for name, path in bench.items() if any(target.split(".")[0] == "tests" for target in imported(name, path))
    }
    assert leaks == set()


def test_the_layout_page_describes_every_package() -> None:
    """Each package here has its paragraph on the layout page, its path in bold (config, errors and ids, one
    module each that imports nothing of the app, share a sentence)."""
    named = {re.sub(r"(/|\.py)$", "", path) for path in re.findall(r"\*\*`([\w/.]+)`\*\*", LAYOUT_PAGE.read_text())}
    packages = {package.replace(".", "/") for package in [*ALLOWED, *COMPOSERS]}
    assert packages - {"app/config", "app/errors", "app/ids"} <= named
