"""A real PostgreSQL server for the store tests (no mock database anywhere).

`BROKER_TEST_POSTGRES` (a DSN of a role that may create databases) names a server to use;
otherwise a throwaway cluster is made with `initdb` in a temporary directory and started with
`pg_ctl` on 127.0.0.1 on a free port (its unix socket in the same directory), and stopped at the
end. PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` OS user
(Debian's package creates it) and its programs run through `runuser`.

Import the fixtures into a test module: `from tests.support.postgres_server import pg_url, postgres_server`.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

ADMIN = "broker_admin"


def _bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        return Path(cand).parent
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One throwaway cluster: start, stop and start again (same port and data) for outage tests."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="broker-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and no `postgres` OS user to run PostgreSQL as")
            self.user = "postgres"
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", ADMIN, "--auth=trust", "-E", "UTF8", "--no-locale")

    def _run(self, prog: str, *args: str) -> subprocess.CompletedProcess:
        cmd = [str(self.bindir / prog), *args]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=self.dir)

    @property
    def admin_url(self) -> str:
        return f"postgresql://{ADMIN}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.dir} -c fsync=on -c synchronous_commit=on"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-o", opts, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def start_server() -> PostgresServer:
    bindir = _bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL (initdb) on this machine and BROKER_TEST_POSTGRES not set; .ci/run installs it")
    server = PostgresServer(bindir)
    server.start()
    return server


def create_database(admin_url: str) -> str:
    """A fresh database on the server; its URL."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    p = conninfo_to_dict(admin_url)
    auth = quote(p["user"], safe="") + (":" + quote(p["password"], safe="") if p.get("password") else "")
    return f"postgresql://{auth}@{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{name}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The admin DSN of a running server, for the whole test session."""
    dsn = os.environ.get("BROKER_TEST_POSTGRES")
    if dsn:
        yield dsn
        return
    server = start_server()
    try:
        yield server.admin_url
    finally:
        server.remove()


@pytest.fixture
def pg_url(postgres_server: str) -> str:
    """A fresh, empty database for one test: the store URL."""
    return create_database(postgres_server)
