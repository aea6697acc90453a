"""Evidence at a glance for one session: what its checkpoint and the vault index claim, and the
`broker prove` bundle for an entry.

Nothing here checks a signature: that takes the log's and the witnesses' public keys, which the vault
does not hold (`broker verify --seal-key ... --witness-key ...` checks them). The page says "claims"
for every field read from a note. The cosignature time is read from the signature bytes as
C2SP `cosignature/v1` lays them out (key ID, 8-byte big-endian time, Ed25519 signature).
"""

from __future__ import annotations

import base64

import orjson
from starlette.requests import Request
from starlette.responses import Response

from journal.checkpoint.checkpoint import Checkpoint, read_checkpoint_note, session_stem
from journal.checkpoint.note import NoteError, Signature, parse_note
from journal.checkpoint.proof_bundle import BundleError, make_bundle
from journal.checkpoint.vault_index import COVERAGE_KINDS, INDEX_NAME, VaultIndex
from journal.confine import read_inside

from .api import Api, ApiError, _int, json_response

_KEY_ID = 4
_SIG = 64
_TIME = 8


def _signature(sig: Signature) -> dict:
    """One signature line as claimed: its key name and ID, and a cosignature's time when it has one."""
    raw = base64.b64decode(sig.b64)
    cosigned_at = None
    if len(raw) == _KEY_ID + _TIME + _SIG:
        cosigned_at = int.from_bytes(raw[_KEY_ID:_KEY_ID + _TIME], "big")
    return {"name": sig.name, "key_id": sig.key_id.hex(), "cosigned_at": cosigned_at}


def checkpoint_claims(note: bytes | None) -> dict | None:
    """The checkpoint note read for display (signatures unchecked); `error` when it does not parse."""
    if note is None:
        return None
    try:
        parsed = parse_note(note)
        body = Checkpoint.parse(parsed.text)
    except NoteError as exc:
        return {"error": str(exc)}
    sigs = [_signature(s) for s in parsed.sigs]
    return {"error": None, "origin": body.origin, "size": body.size, "root": base64.b64encode(body.root).decode(),
            "signer": sigs[0], "witnesses": sigs[1:]}


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
    return {"error": None, "time": index.time, "signer": _signature(parsed.sigs[0]),
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
