"""References in place of prompt text (docs/contract.md, "Model calls").

Every message or content-block text of a model call is replaced by `{"sha256", "size"}`: the SHA-256
and byte length of its UTF-8. In `full` mode the bytes also go to the blob store (content-addressed,
so a history the client resends every turn is stored once) and the reference carries `ref`.
"""

from __future__ import annotations

import hashlib

from journal.canonical import canonical_bytes
from journal.confine import is_blob_name
from journal.store.interface import BlobSink


class Referencer:
    """Turns texts into references; in `full` mode stores their bytes."""

    def __init__(self, mode: str, store: BlobSink | None) -> None:
        if mode not in ("refs", "full"):
            raise ValueError(f"prompt capture mode must be 'refs' or 'full', not {mode!r}")
        if mode == "full" and store is None:
            raise ValueError("prompt capture 'full' needs a blob store")
        self.mode, self.store = mode, store

    def raw(self, data: bytes) -> dict:
        if self.mode == "full":
            assert self.store is not None
            return self.store.put_bytes(data)
        return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}

    def text(self, value: object) -> object:
        """A reference for a string; anything else is returned as it is (no text to hide)."""
        if not isinstance(value, str):
            return value
        return self.raw(value.encode("utf-8", "surrogatepass"))

    def value(self, value: object) -> dict:
        """A reference for a structured value (a JSON tool result): over its canonical bytes."""
        return self.raw(canonical_bytes(value))


def is_text_ref(value: object) -> bool:
    """True for a `{"sha256", "size"}` or `{"sha256", "size", "ref"}` object."""
    return (
        isinstance(value, dict)
        and set(value) in ({"sha256", "size"}, {"sha256", "size", "ref"})
        and is_blob_name(value.get("sha256"))
        and isinstance(value.get("size"), int)
    )


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
