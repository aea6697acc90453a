"""Playback: answering a new run's calls from a recorded session, matched by what the call asked.

A call is matched by (connector, method, URL, request body) in the form the journal records them:
the URL with its credentials redacted, the body encoded as a recorded body and compared by the
SHA-256 of its canonical form (`journal.export.fixture.body_digest`, the rule `broker diff` uses).
Only entries the broker captured on the wire (`capture: "broker"`) answer calls.

The repeat rule: each recorded entry answers at most one call. Calls that are identical by that key
take the recorded entries with that key in seq order (the first identical call gets the earliest
one); a call beyond the number recorded is unmatched. Calls with different keys may come in any
order (an agent's concurrent calls need not keep their recorded order); `broker diff` shows order.

A session that does not verify is refused: an answer must come from an intact record.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from journal.export.fixture import body_digest, chain_verdict, read_entries
from journal.vault import Vault, VaultError
from journal.verify import verify_session

MatchKey = tuple[str, str, str, str]


def match_key(connector: str, method: str, url: str, body: object) -> MatchKey:
    """The key a call is matched by; `url` and `body` as the journal records them."""
    return connector, method.upper(), url, body_digest(body)


def entry_key(entry: dict) -> MatchKey:
    req = entry["request"]
    return match_key(entry["connector"], req["method"], req["url"], req.get("body"))


@dataclass(frozen=True)
class Miss:
    """Why no recorded entry answers a call (a sentence for the 502 the agent gets)."""

    reason: str


class RecordedSession:
    """The recorded answers of one session, handed out by the repeat rule."""

    def __init__(self, vault: Vault, session: str, entries: list[dict]) -> None:
        self.vault = vault
        self.session = session
        self._queues: dict[MatchKey, deque[dict]] = {}
        self._by_call: dict[tuple[str, str, str], int] = {}  # (connector, method, url) -> entries recorded
        self._used: dict[MatchKey, int] = {}
        self._messages: dict[str, list[dict]] = {}  # a WebSocket handshake's hash -> its message entries
        for e in entries:
            if e.get("capture") != "broker":
                continue
            ws = e["request"].get("websocket")
            if isinstance(ws, dict):  # a message answers no call: it is played back after its handshake
                self._messages.setdefault(str(ws.get("handshake")), []).append(e)
                continue
            key = entry_key(e)
            self._queues.setdefault(key, deque()).append(e)
            self._by_call[key[:3]] = self._by_call.get(key[:3], 0) + 1
        self.answerable = sum(len(q) for q in self._queues.values())

    @classmethod
    def load(cls, vault_root: str, session: str) -> RecordedSession:
        """Read and verify a session for playback; VaultError when it is missing or does not verify."""
        vault = Vault.open_existing(vault_root)
        report = verify_session(vault, session).as_dict()
        if not report["intact"]:
            raise VaultError(f"session {session!r} does not verify ({chain_verdict(report)}): refusing to play it back")
        entries, _ = read_entries(vault, session, verified=report)
        return cls(vault, session, entries)

    def take(self, connector: str, method: str, url: str, body: object) -> dict | Miss:
        """The recorded entry that answers this call (and it is used up), or why there is none."""
        key = match_key(connector, method, url, body)
        queue = self._queues.get(key)
        if queue:
            self._used[key] = self._used.get(key, 0) + 1
            return queue.popleft()
        if self._used.get(key):
            return Miss(f"all {self._used[key]} recorded call(s) like this were already answered "
                        f"(each recorded entry answers one call)")
        same_call = self._by_call.get(key[:3], 0)
        if same_call:
            return Miss(f"{same_call} recorded call(s) to this {connector} URL with this method differ in request body")
        return Miss(f"no {connector} call {method} to this URL in recorded session {self.session!r}")

    def messages_of(self, handshake: dict) -> list[dict]:
        """The message entries of a recorded WebSocket (docs/contract.md section 8), in the order they
        went over the connection (both directions), from its handshake's entry."""
        found = self._messages.get(str(handshake.get("hash")), [])
        return sorted(found, key=lambda e: (e["request"]["websocket"].get("message") or 0, e["seq"]))

    def playback_of(self, entry: dict) -> str:
        """The name of the recorded entry that answered a call: `<session>#<seq>`."""
        return f"{self.session}#{entry['seq']}"
