"""Evidence at a glance for one session: what its checkpoint and the vault index claim, and the
`broker prove` bundle for an entry.

Nothing here checks a signature (journal/checkpoint/claims.py says why): the page says "claims" for
every field read from a note.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from journal.checkpoint.checkpoint import read_checkpoint_note, session_stem
from journal.checkpoint.claims import checkpoint_claims, signature_claims
from journal.checkpoint.note import NoteError, parse_note
from journal.checkpoint.proof_bundle import BundleError, make_bundle
from journal.checkpoint.vault_index import COVERAGE_KINDS, INDEX_NAME, VaultIndex
from journal.confine import read_inside

from .api import Api, ApiError, _int, json_response


def index_claims(note: bytes | None, stem: str) -> dict | None:
    """What the vault index claims about one session: its sealed size and its declared coverage."""
    if note is None:
        return None
    try:
        parsed = parse_note(note)
        index = VaultIndex.parse(parsed.text)
    except NoteError as exc:
        return {"error": str(exc)}
    sealed = index.sessions.get(stem)
    coverage: dict[str, list[dict]] = {kind: [] for kind in COVERAGE_KINDS}
    for (s, host, what), count in sorted(index.coverage.items()):
        if s == stem:
            coverage[what].append({"host": host, "count": count})
    return {"error": None, "time": index.time, "signer": signature_claims(parsed.sigs[0]),
            "sealed_size": sealed.size if sealed else None, "coverage": coverage}


class EvidenceApi:
    """`/api/session/evidence` and `/api/session/prove`, over the same vault and line index as Api."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def routes(self) -> dict:
        return {"session/evidence": self.evidence, "session/prove": self.prove}

    def evidence(self, request: Request) -> Response:
        sid = self.api.session(request)
        vault = self.api.vault
        lines = self.api.index.head(sid)["lines"]
        cp = checkpoint_claims(read_checkpoint_note(vault, sid))
        covered = cp["size"] if cp and not cp.get("error") else 0
        return json_response({
            "session": sid, "lines": lines, "checkpoint": cp,
            "unsealed": {"from_seq": covered + 1, "entries": max(0, lines - covered)} if lines > covered else None,
            "index": index_claims(read_inside(vault.root, ("seals", INDEX_NAME)), session_stem(sid)),
            "checked_here": False,
        })

    def prove(self, request: Request) -> Response:
        """The `broker prove` bundle for line `seq`, as `broker prove --out` writes it."""
        sid = self.api.session(request)
        n = _int(request, "seq", low=1)
        try:
            bundle = make_bundle(self.api.vault, sid, n)
        except (BundleError, NoteError) as exc:
            raise ApiError(409, str(exc)) from None
        data = orjson.dumps(bundle, option=orjson.OPT_INDENT_2) + b"\n"
        stem = session_stem(sid)
        return Response(data, media_type="application/json", headers={
            "content-disposition": f'attachment; filename="{stem}-seq-{n}.proof.json"', "cache-control": "no-store",
        })
