"""Errors in one place: every error a user can cause derives from journal.errors.BrokerError, and the
`broker` command prints it as one line and exits 2; anything else is a bug: its traceback, exit 1."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from journal.errors import BrokerError, InputError
from tests.support.example_vault import ROOT, copy_example


def run_broker_with(patch: str, *args: str) -> subprocess.CompletedProcess:
    """`broker ARGS` with `patch` (Python) run first in the same process: how a test plants a bug."""
    code = f"import sys\n{patch}\nfrom broker.cli import main\nsys.argv = ['broker', *sys.argv[1:]]\nmain()\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize("bug", ["ValueError('a bug')", "KeyError('hash')", "TypeError('a bug')"])
def test_a_bug_shows_its_traceback_and_exits_1(tmp_path, bug):
    copy_example(tmp_path / "v")
    patch = f"import broker.cli.audit as a\ndef boom(*args, **kwargs):\n    raise {bug}\na.summarize_session = boom"
    r = run_broker_with(patch, "sessions", "--vault", str(tmp_path / "v"))
    assert r.returncode == 1, r.stderr
    assert "Traceback (most recent call last)" in r.stderr and bug.split("(")[0] in r.stderr
    assert "broker: error:" not in r.stderr


@pytest.mark.parametrize("error", ["InputError('give a code (404)')", "OSError(28, 'No space left on device')"])
def test_a_user_error_is_one_line_and_exit_2(tmp_path, error):
    copy_example(tmp_path / "v")
    patch = (f"from journal.errors import InputError\nimport broker.cli.audit as a\ndef boom(*args, **kwargs):\n"
             f"    raise {error}\na.summarize_session = boom")
    r = run_broker_with(patch, "sessions", "--vault", str(tmp_path / "v"))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("broker: error: ") and "Traceback" not in r.stderr


def test_real_user_errors_are_one_line_and_exit_2(tmp_path):
    copy_example(tmp_path / "v")
    bad_connectors = tmp_path / "c.toml"
    bad_connectors.write_text("[[connector]\n")
    cases = [
        ["search", "--vault", str(tmp_path / "v"), "--status", "abc"],  # InputError from the query
        ["show", "--vault", str(tmp_path / "nowhere"), "s"],  # VaultError
        ["run", "--vault", str(tmp_path / "v"), "--listen", "127.0.0.1:0", "--connectors", str(bad_connectors)],
    ]
    for args in cases:
        r = run_broker_with("", *args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, (args, r.stderr)


def _public_exceptions() -> list[type[BaseException]]:
    found = []
    for package in ("journal", "broker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__main__.py":
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            module = importlib.import_module(name)
            for cls_name, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == name and not cls_name.startswith("_"):
                    found.append(cls)
    return found


def test_every_public_error_derives_from_the_one_root():
    classes = _public_exceptions()
    assert len(classes) >= 20  # the walk found them
    stray = [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, BrokerError)]
    assert stray == [], "derive these from journal.errors.BrokerError (or an area class under it)"


def test_callers_that_catch_value_error_still_catch_the_input_errors():
    from journal.connectors.registry import Registry
    from journal.entry import ContractError
    from journal.search import Query

    assert issubclass(InputError, ValueError) and issubclass(ContractError, ValueError)
    with pytest.raises(ValueError, match="give a code"):
        Query(status="abc")
    bad = Path(__file__).parent / "no-such-connectors.toml"
    with pytest.raises(ValueError, match="cannot read connectors file"):
        Registry.builtin().with_file(bad)
