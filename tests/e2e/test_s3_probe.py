"""`broker store probe s3://...` against moto's S3 server on loopback: facts as observed, never assumed."""

from __future__ import annotations

import subprocess

import pytest

from journal.store.s3_probe import probe
from tests.support.broker_harness import BIN
from tests.support.s3_server import s3_server

pytestmark = pytest.mark.e2e
__all__ = ["s3_server"]


def test_a_bucket_without_object_lock_refuses_only_the_create_only_overwrite(s3_server):
    facts = probe(f"s3://{s3_server.new_bucket()}/p")
    assert facts[0].refused is True and "PreconditionFailed" in facts[0].detail
    assert [f.refused for f in facts[1:]] == [None, None, None]
    assert all("Object Lock is not enabled" in f.detail for f in facts[1:])


def test_a_locked_bucket_is_probed_and_each_answer_is_what_the_server_did(s3_server):
    bucket = s3_server.new_bucket(lock=True)
    facts = probe(f"s3://{bucket}/p", retain_seconds=5)
    by = {f.question: f for f in facts}
    assert by["a delete of a locked version (compliance mode)"].refused is True
    # moto accepts these two where AWS S3 refuses them: the probe reports what happened, read back from the
    # server, whichever it is (this assertion holds for both: the verdict and the read-back agree)
    shorten = by["a shortened retention (compliance mode)"]
    switch = by["a switch from compliance to governance mode"]
    assert shorten.refused in (True, False) and switch.refused in (True, False)
    assert ("mode now COMPLIANCE" in switch.detail) == switch.refused
    out = subprocess.run([str(BIN / "broker"), "store", "probe", f"s3://{bucket}/cli", "--retain-seconds", "5"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == (0 if all(f.refused for f in facts) else 1), out.stdout + out.stderr
    assert "a create-only overwrite (If-None-Match: *) of an existing object: refused" in out.stdout
