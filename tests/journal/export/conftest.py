"""The vault most export tests read: the export session and one session of every kind of entry."""

from __future__ import annotations

import pytest

from tests.support.export_factories import record_every_kind, record_export_session


@pytest.fixture(scope="module")
def vault(tmp_path_factory):
    """Module-scoped (recording every kind takes a while); a test module with its own `vault` overrides it."""
    root = tmp_path_factory.mktemp("kinds")
    record_export_session(root)
    record_every_kind(root)
    return root
