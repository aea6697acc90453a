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


def imported_names(name: str, path: Path, known: set[str], tree: ast.Module | None = None) -> set[str]:
    """Every module `name` imports (absolute names, ours or not); of `tree` when given, else of the file."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree if tree is not None else ast.parse(path.read_text(), str(path))):
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


# -- what a reader loads at start-up: the imports that run when a module is imported ---------------------
#
# The graph above counts every import; start-up pays only for the eager ones: module level and class bodies,
# not function bodies (an import there runs when the function does) and not `if TYPE_CHECKING:` blocks.
# tests/e2e/test_reader_startup_imports.py runs the commands themselves and reads what they loaded.

READERS_NEVER_LOAD = ("journal.redact", "journal.record", "journal.writer", "journal.store", "journal.checkpoint",
                      "cryptography", "httpx", "mitmproxy", "mcp", "starlette", "rich", "logging", "socket",
                      "tempfile", "secrets", "random", "pickle", "signal")
"""What `broker verify`, `sessions` and `show` load only when asked for more than reading a file vault: a
--store URL, a --seal-key, a progress bar on a terminal; never capture, redaction or the writer. Nor what
only a fork of the verifier needs (pickle; signal to stop a child) or a fresh random value (secrets, random:
~1.5 ms of start-up, where os.urandom does)."""
SHOW_NEVER_LOADS = READERS_NEVER_LOAD + ("journal.verify", "journal.summary", "journal.canonical", "journal.chain",
                                         "msgspec", "hashlib")
"""`broker show` reads entries and checks none: no verifier, no canonical form (msgspec)."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def eager_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules `name` imports when it is imported (absolute names, ours or not)."""
    tree = ast.parse(path.read_text(), str(path))
    kept: list[ast.stmt] = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                walk(node.orelse)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                kept.append(node)
            for field in ("body", "orelse", "finalbody"):  # class, if, try, with, for, while
                walk(getattr(node, field, []))
            for handler in getattr(node, "handlers", []):
                walk(handler.body)

    walk(tree.body)
    return imported_names(name, path, known, ast.Module(body=kept, type_ignores=[]))


def loaded_at_import(start: str) -> set[str]:
    """Every module importing `start` loads, as far as our sources say: ours followed (with the packages
    above each), others named as imported (what a third-party or standard module imports in turn is its
    own)."""
    mods = modules()
    known = set(mods)
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in known]
        if name in mods:
            todo += sorted(eager_imports(name, mods[name], known))
    return seen


def _within(loaded: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == b or m.startswith(b + ".") for b in banned))


def command_module(command: str) -> str:
    """The module `broker COMMAND` imports (the group's table, broker/cli/main.py)."""
    from broker.cli.main import COMMANDS

    return f"broker.cli.{COMMANDS[command][0]}"


def test_show_loads_no_verifier_and_nothing_a_reader_does_not_need():
    assert _within(loaded_at_import(command_module("show")), SHOW_NEVER_LOADS) == []


def test_verify_and_sessions_load_nothing_a_reader_does_not_need():
    for command in ("verify", "sessions"):
        assert _within(loaded_at_import(command_module(command)), READERS_NEVER_LOAD) == [], command


def test_a_checkpoint_notes_claims_are_read_without_cryptography():
    """The sessions list reads each checkpoint note (journal/summary.py checkpoint_status)."""
    assert _within(loaded_at_import("journal.checkpoint.claims"), ("cryptography",)) == []


def test_the_group_alone_loads_no_command_and_no_journal_module_but_its_errors():
    """`broker --help` and `--version`: the commands are imported when one runs (broker/cli/main.py)."""
    ours = {m for m in loaded_at_import("broker.cli.main") if m.split(".")[0] in PACKAGES}
    assert ours == {"broker", "broker.cli", "broker.cli.main", "broker.cli.exit_codes", "journal", "journal.errors"}


def test_the_start_up_check_sees_what_it_is_for(tmp_path):
    """Module-level and class-body imports count, and try/else blocks; function bodies and TYPE_CHECKING
    blocks do not; the packages above a module are loaded with it."""
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nimport a\nif TYPE_CHECKING:\n    import b\nelse:\n    import c\n"
                   "try:\n    import d\nexcept ImportError:\n    import e\nclass K:\n    import f\n"
                   "def g():\n    import h\n")
    assert eager_imports("m", src, set()) == {"typing", "a", "c", "d", "e", "f"}
    assert "journal" in loaded_at_import("journal.vault")
    assert _within(loaded_at_import("journal.checkpoint.keys"), ("cryptography",))  # imports it at the top
