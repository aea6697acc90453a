"""A real S3 server on loopback for the object-storage tests: moto's server (`moto[server]`, a test extra),
started as its own process on 127.0.0.1 on a free port, stoppable and restartable on the same port for
outage tests. Its state lives in that process: a restart starts empty.

Import the fixture into a test module: `from tests.support.s3_server import s3_server`; `s3_server.env`
holds the AWS variables a broker process needs, `s3_server.client()` a boto3 client, `new_bucket()`
a fresh bucket (optionally with Object Lock).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_ACCESS_KEY_ID": "test",
                    "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
                    "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                    "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("moto server exited at start") from None
                time.sleep(0.1)
        raise RuntimeError("moto server did not listen within 60 s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="test",
            aws_secret_access_key="test", config=Config(s3={"addressing_style": "path"}))

    def new_bucket(self, *, lock: bool = False) -> str:
        name = f"b-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name, ObjectLockEnabledForBucket=lock)
        return name


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    pytest.importorskip("moto.server", reason="moto[server] is a test extra (pyproject.toml)")
    server = S3Server()
    server.start()
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)  # the code under test reads the usual AWS variables, as in production
    try:
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
