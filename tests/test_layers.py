"""Imports run one way: no module imports another that (directly or not) imports it back, and inside jobs/ every
import goes down the layers docs/architecture.md draws. Imports inside functions count: they hide a cycle, they
do not break it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "jobs", "models", "tui")

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def jobs_layers() -> list[list[str]]:
    """jobs/ from the bottom up, as docs/architecture.md's table of layers lists them (the one list of them): a
    module imports only from layers below its own."""
    text = ARCHITECTURE.read_text()
    table = text[text.index("| layer | modules | what |") :].split("\n\n")[0]
    layers = []
    for row in table.splitlines()[2:]:
        cells = row.split("|")
        assert cells[1].strip() == str(len(layers)), f"layers are numbered 0, 1, 2, … in order: {row[:40]}"
        layers.append(re.findall(r"`([\w.]+)`", cells[2]))
    return layers


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports, anywhere in it (`from pkg import mod` counts as pkg.mod)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    known = set(files)
    return {m: imports_of(p, known) - {m} - {m.rpartition(".")[0]} for m, p in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_back():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_jobs_imports_go_down_the_layers():
    rank = {f"jobs.{m}": i for i, layer in enumerate(jobs_layers()) for m in layer}
    edges = graph()
    modules = {m for m in edges if m.startswith("jobs.")} - {"jobs", "jobs.run"}
    assert modules <= set(rank), f"give these modules a layer in docs/architecture.md: {sorted(modules - set(rank))}"
    assert set(rank) <= modules, f"docs/architecture.md lists modules that are not: {sorted(set(rank) - modules)}"
    upward = [
        f"{m} (layer {rank[m]}) imports {d} (layer {rank[d]})"
        for m in sorted(modules)
        for d in sorted(edges[m])
        if d in rank and rank[d] >= rank[m]
    ]
    assert upward == []


def test_keys_and_protocol_import_nothing_of_gpudeck():
    edges = graph()
    assert edges["jobs.keys"] <= {"models.states"}
    assert edges["models.states"] == set()
    assert edges["models.common"] == set()
    assert edges["models.protocol"] == set()


def test_models_never_imports_the_service_and_the_tui_talks_http_only():
    edges = graph()
    service = ("api", "jobs", "tui")
    assert [(m, d) for m in edges if m.startswith("models") for d in edges[m] if d.startswith(service)] == []
    # (the server commands of jobs.cli and api.serve are loaded by name, when one runs: no import)
    tui = [(m, d) for m in edges if m.startswith("tui") for d in edges[m]]
    assert [(m, d) for m, d in tui if d.startswith(("api", "jobs"))] == []


def test_test_modules_import_helpers_from_tests_support_only():
    """What tests share lives in tests/support (or is a conftest fixture); a test module importing another
    test module (or conftest) couples the two and runs the other's module-level code."""
    tests = ROOT / "tests"
    found = []
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [
                f"{path.relative_to(ROOT)} imports {n}"
                for n in names
                if n.startswith("tests.") and not n.startswith(("tests.support", "tests.bench.plain_fit"))
            ]
    assert found == []
