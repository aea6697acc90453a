"""Fake SaaS upstreams (Gmail, Calendar, Drive, Slack, GitHub, Graph, OAuth) over local TLS.

Why: the broker's end-to-end tests and benchmarks run offline; this package stands in for the real
APIs, answering in their shapes, keeping state, and streaming big bodies. See ``server.Upstream``.
"""

from __future__ import annotations

from .bigbody import big_body_bytes, big_body_chunks, big_body_sha256
from .server import FakeState, Upstream

__all__ = ["FakeState", "Upstream", "big_body_bytes", "big_body_chunks", "big_body_sha256"]
