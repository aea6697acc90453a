"""The C2SP tlog-witness protocol (c2sp.org/tlog-witness): the witness's logic, its HTTP app, a client.

A witness keeps, per log origin, the latest checkpoint it cosigned, and cosigns a new one only when a
consistency proof shows it extends that one. So once a witness has cosigned size N of a session,
nobody (the operator who holds the log key included) can present a shorter or different history for
that origin without the witness noticing.

`POST <prefix>/add-checkpoint`, body `old <size>\\n`, up to 63 base64 proof lines, `\\n`, then the
checkpoint note. Answers: 200 with cosignature lines; 400 malformed or old > size; 403 no trusted
signature (or a trusted key's signature fails); 404 unknown origin; 409 `text/x.tlog.size` with the
witness's size when `old` is not it; 422 a proof that does not verify, a non-empty proof from 0, a size
equal to the stored one with another root, or size 0 with a root other than the empty tree's.
`GET <prefix>/<sha256(origin) hex>/checkpoint` serves the latest cosigned checkpoint (the monitoring
retrieval of the same spec), which `broker verify --witness URL` reads.

Which logs: each `--log-key` vkey is trusted for the origin that is its key name and for every origin
under it (`<name>/...`): the vault's key name is the vault origin, each session's origin lies below.
State: one file per origin in the state directory, `<sha256(origin) hex>.checkpoint` (the cosigned
note), replaced atomically; the check-and-update holds a lock (threads and processes), and the state
is persisted before the answer.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from journal.checkpoint.checkpoint import Checkpoint
from journal.checkpoint.merkle import EMPTY_ROOT, ProofError, verify_consistency
from journal.checkpoint.note import NoteError, Signature, Signer, Verifier, cosign, open_note, parse_note
from journal.errors import BrokerError
from journal.vault import write_atomically

MAX_PROOF_LINES = 63
SIZE_CONTENT_TYPE = "text/x.tlog.size"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


def origin_hash(origin: str) -> str:
    return hashlib.sha256(origin.encode()).hexdigest()


class Witness:
    """The witness's state and rules; HTTP-free so the tests and the app share one implementation."""

    def __init__(self, signer: Signer, state_dir: str | os.PathLike, log_keys: list[Verifier]) -> None:
        self.signer = signer
        self.state = Path(state_dir)
        self.state.mkdir(parents=True, exist_ok=True)
        self.log_keys = log_keys
        self._lock = threading.Lock()

    def _keys_for(self, origin: str) -> list[Verifier]:
        return [k for k in self.log_keys if origin == k.name or origin.startswith(k.name + "/")]

    def _path(self, origin: str) -> Path:
        return self.state / (origin_hash(origin) + ".checkpoint")

    def latest(self, origin: str) -> tuple[Checkpoint, bytes] | None:
        try:
            note = self._path(origin).read_bytes()
        except FileNotFoundError:
            return None
        return Checkpoint.parse(parse_note(note).text), note

    def add_checkpoint(self, body: bytes, now: int | None = None) -> Answer:
        try:
            old, proof, note = _parse_request(body)
            parsed = parse_note(note)
            cp = Checkpoint.parse(parsed.text)
        except (NoteError, ValueError) as exc:
            return Answer(400, f"{exc}\n".encode())
        keys = self._keys_for(cp.origin)
        if not keys:
            return Answer(404, b"unknown log origin\n")
        try:
            open_note(note, keys)
        except NoteError as exc:
            return Answer(403, f"{exc}\n".encode())
        if old > cp.size:
            return Answer(400, b"old size is larger than the checkpoint size\n")
        with self._lock, _file_lock(self.state / ".lock"):
            stored = self.latest(cp.origin)
            stored_size = stored[0].size if stored else 0
            if old != stored_size:
                return Answer(409, f"{stored_size}\n".encode(), SIZE_CONTENT_TYPE)
            if cp.size == 0 and cp.root != EMPTY_ROOT:
                return Answer(422, b"a checkpoint of size 0 must have the empty tree's root\n")
            if old == 0:
                if proof:
                    return Answer(422, b"a proof from size 0 must be empty\n")
            elif stored is not None:
                try:
                    verify_consistency(old, cp.size, stored[0].root, cp.root, proof)
                except ProofError as exc:
                    return Answer(422, f"consistency proof: {exc}\n".encode())
            ts = int(time.time()) if now is None else now
            line = cosign(parsed.text, self.signer, ts).line()
            kept = [s for s in parsed.sigs if any(k.name == s.name and k.key_id == s.key_id for k in keys)]
            stored_note = parsed.text + "\n" + "".join(s.line() for s in kept) + line
            write_atomically(self._path(cp.origin), stored_note.encode())
        return Answer(200, line.encode())


class _file_lock:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _parse_request(body: bytes) -> tuple[int, list[bytes], bytes]:
    head, sep, note = body.partition(b"\n\n")
    lines = head.split(b"\n")
    if not sep or not lines[0].startswith(b"old "):
        raise ValueError("malformed add-checkpoint body: expected 'old <size>', proof lines, a blank line")
    size = lines[0][4:]
    if not size.isdigit() or (size != b"0" and size.startswith(b"0")):
        raise ValueError("malformed old size")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise ValueError("more than 63 proof lines")
    proof = []
    for line in lines[1:]:
        try:
            h = base64.b64decode(line, validate=True)
        except ValueError:
            raise ValueError("a proof line is not base64") from None
        proof.append(h)
    return int(size), proof, note


def request_body(old: int, proof: list[bytes], note: bytes) -> bytes:
    head = f"old {old}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof)
    return head.encode() + b"\n" + note


def app(witness: Witness):  # -> starlette.applications.Starlette
    """The witness over HTTP (Starlette): the two endpoints above."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def add_checkpoint(request: Request) -> Response:
        body = await request.body()
        answer = await run_in_threadpool(witness.add_checkpoint, body)
        return Response(answer.body, answer.status, media_type=answer.content_type)

    async def get_checkpoint(request: Request) -> Response:
        want = request.path_params["origin_hash"]
        path = witness.state / f"{want}.checkpoint"
        if re.fullmatch(r"[0-9a-f]{64}", want) and path.is_file():
            return Response(path.read_bytes(), 200, media_type="text/plain; charset=utf-8")
        return Response(b"no checkpoint for that origin\n", 404, media_type="text/plain; charset=utf-8")

    return Starlette(routes=[
        Route("/add-checkpoint", add_checkpoint, methods=["POST"]),
        Route("/{origin_hash:str}/checkpoint", get_checkpoint, methods=["GET"]),
    ])


# -- the client side --------------------------------------------------------------------------


class WitnessUnavailable(BrokerError):
    """The witness could not be reached or answered out of protocol (never blocks recording)."""


@dataclass
class WitnessClient:
    url: str  # the submission (and monitoring) prefix
    key: Verifier | None = None  # the witness's cosigner key, when known: only its lines are kept
    timeout: float = 3.0
    sizes: dict[str, int] = field(default_factory=dict)  # origin -> the size it last cosigned for us

    def add_checkpoint(self, note: bytes, old: int, proof: list[bytes]) -> Answer:
        import httpx

        try:
            r = httpx.post(self.url.rstrip("/") + "/add-checkpoint", content=request_body(old, proof, note),
                           timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise WitnessUnavailable(f"witness {self.url}: {exc or type(exc).__name__}") from None
        return Answer(r.status_code, r.content, r.headers.get("content-type", ""))

    def latest(self, origin: str) -> bytes | None:
        """The witness's latest cosigned checkpoint note for `origin`, or None when it has none."""
        import httpx

        try:
            r = httpx.get(f"{self.url.rstrip('/')}/{origin_hash(origin)}/checkpoint", timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise WitnessUnavailable(f"witness {self.url}: {exc or type(exc).__name__}") from None
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise WitnessUnavailable(f"witness {self.url}: HTTP {r.status_code} for the latest checkpoint")
        return r.content

    def probe_size(self, note: bytes, size: int) -> int | None:
        """The witness's latest size for the note's origin, learned the way tlog-witness allows any
        client to: submit the checkpoint with `old` = its own size; a 409 carries the witness's size,
        a 200 means it is that size. None when the witness does not know the origin (404). Raises
        WitnessUnavailable on anything else, NoteError on a 422 (the witness saw another tree)."""
        a = self.add_checkpoint(note, size, [])
        if a.status == 409:
            try:
                return int(a.body.strip())
            except ValueError:
                raise WitnessUnavailable(f"witness {self.url}: 409 without a size") from None
        if a.status == 200:
            return size
        if a.status == 404:
            return None
        if a.status == 422:
            raise NoteError(f"witness {self.url} holds another tree of the same size: "
                            f"{a.body.decode(errors='replace').strip()}")
        raise WitnessUnavailable(f"witness {self.url}: HTTP {a.status}")

    def cosignatures(self, answer: bytes, text: str) -> list[Signature]:
        """The cosignature lines of a 200 answer worth keeping: those of this witness's key when it is
        known (checked), else every well-formed line."""
        note = parse_note(text.encode() + b"\n" + answer)
        if self.key is None:
            return note.sigs
        kept = []
        for s in note.sigs:
            if s.name == self.key.name and s.key_id == self.key.key_id:
                self.key.verify(text.encode(), base64.b64decode(s.b64)[4:])
                kept.append(s)
        if not kept:
            raise NoteError(f"witness {self.url} answered without a cosignature of its key")
        return kept
