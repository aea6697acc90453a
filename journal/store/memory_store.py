"""An entry writer and blob sink in memory, shipped for tests (as httpx ships its mock transport).

`MemoryWriter` goes through the same pipeline as the file and PostgreSQL writers
(journal/append_pipeline.py: contract check, spilling into the line limit, canonical form, group
commit, dedupe, chaining), so the lines it holds are the bytes a vault would hold; only the storage
is a list. Use it where a test needs the entries a Recorder, the recording service or the MCP shim
produce, not a vault on disk:

    writer = MemoryWriter()
    Recorder(writer).record(...)
    (entry,) = writer.entries("s1")
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator

import orjson

from journal.append_pipeline import (
    DEDUPE_LINES,
    AppendPipeline,
    JournalError,
    Lane,
    Pending,
    chain_group,
    recent_fields,
)
from journal.blobstore import ref_object
from journal.bodies import LINE_LIMIT
from journal.chain import GENESIS


class MemoryBlobWriter:
    """One blob being written into a MemoryBlobs."""

    def __init__(self, sink: MemoryBlobs) -> None:
        self._parts: list[bytes]
        self._sink, self._parts, self._hash, self.size = sink, [], hashlib.sha256(), 0
        self._done = False

    def write(self, chunk: bytes) -> None:
        self._parts.append(bytes(chunk))
        self._hash.update(chunk)
        self.size += len(chunk)

    def commit(self) -> dict:
        if self._done:
            raise JournalError("blob already committed or aborted")
        self._done = True
        digest = self._hash.hexdigest()
        with self._sink.lock:
            self._sink.blobs.setdefault(digest, b"".join(self._parts))
        return ref_object(digest, self.size)

    def abort(self) -> None:
        self._done = True
        self._parts = []

    def __enter__(self) -> MemoryBlobWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


class MemoryBlobs:
    """A blob sink (journal/store/interface.py BlobSink) holding blobs in a dict by SHA-256."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def open_writer(self) -> MemoryBlobWriter:
        return MemoryBlobWriter(self)

    def put_bytes(self, data: bytes) -> dict:
        with self.open_writer() as w:
            w.write(data)
            return w.commit()

    def put_stream(self, chunks) -> dict:
        with self.open_writer() as w:
            for chunk in chunks:
                w.write(chunk)
            return w.commit()

    def has_blob(self, digest: str) -> bool:
        return digest in self.blobs

    def read(self, ref: dict) -> bytes:
        """The bytes of a blob reference (KeyError when it was never stored)."""
        return self.blobs[ref["sha256"]]


class _MemoryLane(Lane):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[bytes] = []  # the session's lines, each with its newline


class MemoryWriter(AppendPipeline):
    """An EntryWriter (journal/store/interface.py) whose sessions are lists of lines. Thread-safe."""

    def __init__(self, *, line_limit: int = LINE_LIMIT) -> None:
        self.blobs = MemoryBlobs()
        self.line_limit = line_limit
        self.on_durable = None
        self._lanes: dict[str, _MemoryLane] = {}
        self._lock = threading.Lock()

    # -- the pipeline's storage part -------------------------------------------------------------

    def _acquire(self, session: str) -> _MemoryLane:
        with self._lock:
            lane = self._lanes.get(session)
            if lane is None:
                lane = self._lanes[session] = _MemoryLane()
            return lane

    def _commit(self, lane: _MemoryLane, batch: list[Pending]) -> None:  # type: ignore[override]
        seq, prev = self._head_of(lane)
        recent = recent_fields(reversed(lane.lines[-DEDUPE_LINES:])) if any(p.dedupe for p in batch) else None
        parts, chained, _, _ = chain_group(batch, seq, prev, self.line_limit, recent)
        data, start, lines = b"".join(parts), 0, []
        for _ in chained:
            end = data.index(b"\n", start) + 1
            lines.append(data[start:end])
            start = end
        with self._lock:
            lane.lines += lines
        if chained:
            self._durable(batch[0].fields["session"], chained)

    @staticmethod
    def _head_of(lane: _MemoryLane) -> tuple[int, str]:
        if not lane.lines:
            return 0, GENESIS
        last = orjson.loads(lane.lines[-1])
        return last["seq"], last["hash"]

    # -- the rest of the writer protocol ---------------------------------------------------------

    def check_session(self, session: str) -> None:
        """Any session can be appended to in memory."""

    def head(self, session: str) -> tuple[int, str]:
        return self._head_of(self._acquire(session))

    def lines_after(self, session: str, seq: int = 0, last_seq: int | None = None) -> Iterator[bytes]:
        with self._lock:
            lane = self._lanes.get(session)
            lines = list(lane.lines[seq:last_seq]) if lane is not None else []
        return iter(lines)

    def has_session(self, session: str) -> bool:
        with self._lock:
            return session in self._lanes

    def line_at(self, session: str, seq: int) -> bytes | None:
        got = list(self.lines_after(session, seq - 1, seq)) if seq >= 1 else []
        return got[0] if got else None

    def checkpoint_vault(self) -> None:
        return None

    def sessions(self) -> list[str]:
        """The sessions that hold entries, in the order they were begun."""
        with self._lock:
            return [s for s, lane in self._lanes.items() if lane.lines]

    def entries(self, session: str) -> list[dict]:
        """The session's entries, parsed, in seq order."""
        return [orjson.loads(line) for line in self.lines_after(session)]

    def close(self) -> None:
        """Nothing to release: the entries stay readable."""

    def __enter__(self) -> MemoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
