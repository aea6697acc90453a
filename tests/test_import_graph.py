"""The import graph of the library and the capture points: no circle anywhere, and journal/ (the contract
in code) imports no capture point and no proxy or MCP library.

Every import counts: top level, inside functions, under TYPE_CHECKING. An import of `pkg.mod` is an edge
to that module; `from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("journal", "broker", "addons")
JOURNAL_MUST_NOT_IMPORT = ("broker", "addons", "mitmproxy", "mcp")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imported_names(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module `name` imports (absolute names, ours or not)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imported_names(name, path, known) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_anywhere():
    found = cycles(import_graph())
    assert not found, "import circles (each line one set of modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_journal_imports_no_capture_point_and_no_proxy_or_mcp_library():
    bad = []
    for name, imported in import_graph().items():
        if name.split(".")[0] != "journal":
            continue
        bad += [f"{name} imports {m}" for m in sorted(imported) if m.split(".")[0] in JOURNAL_MUST_NOT_IMPORT]
    assert not bad, "\n".join(bad)


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The checker itself: a circle through a function-level import is found; a chain is not a circle;
    relative and function-level imports are edges."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"a"}}) == [["a"]]
    src = tmp_path / "fold.py"
    src.write_text("from .plan import x\n\ndef f():\n    from broker.cli import options\n    import mitmproxy.http\n")
    known = {"journal.replay.plan", "broker.cli.options"}
    assert imported_names("journal.replay.fold", src, known) == {"journal.replay.plan", "broker.cli.options",
                                                                 "mitmproxy.http"}
