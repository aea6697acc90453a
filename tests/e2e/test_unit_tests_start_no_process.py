"""tests/conftest.py's rule, tried the ways a unit test could get past it: a unit test that starts a
process (subprocess, multiprocessing, a fork, asyncio, os.system) fails, naming what it started; a
server thread, a test marked e2e and a test that starts nothing pass. Runs pytest in a child
process on a copy of that conftest."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CASES = '''
import asyncio
import multiprocessing
import os
import subprocess
import sys
import threading
from http.server import HTTPServer, BaseHTTPRequestHandler

import pytest


def nothing():
    pass


def test_subprocess_run():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_multiprocessing_spawn():
    p = multiprocessing.get_context("spawn").Process(target=nothing)
    p.start()
    p.join()


def test_fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def test_asyncio_subprocess():
    async def run():
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await proc.wait()
    asyncio.run(run())


def test_os_system():
    os.system("true")


@pytest.fixture(scope="module")
def started_by_a_module_fixture():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    yield
    proc.wait()


def test_in_a_module_fixture(started_by_a_module_fixture):
    pass


def test_a_server_thread_is_not_a_process():
    server = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.shutdown()
    thread.join()


@pytest.mark.e2e
def test_marked_e2e_may_start_one():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_starts_nothing():
    assert True
'''


def test_a_unit_test_that_starts_a_process_fails_and_names_it(tmp_path: Path) -> None:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = e2e: starts processes\n")
    (tmp_path / "test_cases.py").write_text(textwrap.dedent(CASES))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    for name in ("subprocess_run", "multiprocessing_spawn", "fork", "asyncio_subprocess", "os_system",
                 "in_a_module_fixture"):
        assert f"ERROR test_cases.py::test_{name} " in out, name
    for name in ("a_server_thread_is_not_a_process", "marked_e2e_may_start_one", "starts_nothing"):
        assert f"PASSED test_cases.py::test_{name}" in out, name
        assert f"ERROR test_cases.py::test_{name} " not in out, name
    assert "started a process:\n  subprocess: " in out and "Move its file to tests/e2e/" in out
    assert "multiprocessing: " in out and "os.fork()" in out and "os.system(true)" in out
