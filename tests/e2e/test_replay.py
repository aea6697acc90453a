"""Replay (journal/replay): the example vault's views and revert plan, synthetic sessions per connector,
broken chains, spilled content, safe file names, determinism and the CLI."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from journal.replay import BrokenChainError, plan_dict, replay_session, views_dir, write_outputs
from journal.replay.connectors import modules
from journal.replay.markdown import code, esc
from journal.replay.views import note_name
from journal.vault import Vault
from tests.support import replay_factories as rf
from tests.support.example_vault import ROOT, SESSION, copy_example

GMAIL_MSG = "https://gmail.googleapis.com/gmail/v1/users/me/messages"


def broker(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, env=env)


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    """A private copy of the example vault, replayed once (views written)."""
    root = tmp_path_factory.mktemp("example") / "v"
    copy_example(root)
    vault = Vault.open_existing(root)
    write_outputs(vault, replay_session(vault, SESSION))
    return root


def _plan(root: Path, session: str) -> dict:
    """Replay `session` (writing its views, as the CLI does) and return its revert plan."""
    vault = Vault.open_existing(root)
    rp = replay_session(vault, session)
    write_outputs(vault, rp)
    return plan_dict(rp)


def _steps(plan: dict) -> dict[int, dict]:
    return {s["for_seq"]: s for s in plan["steps"]}


def _views(root: Path, session: str) -> dict:
    return orjson.loads((views_dir(Vault(root), session) / "views.json").read_bytes())


def _resource(views: dict, rid: str) -> dict:
    return next(r for r in views["resources"] if r["id"] == rid)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- the example vault -------------------------------------------------------------------------------


def test_example_views_name_every_resource_touched(example):
    views = _views(example, SESSION)
    assert views["format"] == "connector-replay/1" and views["chain"]["intact"] is True
    ids = {r["id"] for r in views["resources"]}
    assert ids == {
        "gmail/message/me/192a5f0c3e1d7b20", "gmail/message/me/192a4e88a0c2f911", "gmail/message/me/192a61b7d40c0e55",
        "gmail/attachment/me/192a5f0c3e1d7b20/ANGjdJ8vQ3",
        "calendar/event/primary/7kq2v0d1lf9mbm3cfd2a3n5u8c",
        "drive/file/1NwContractsF0lder", "drive/file/1OldDraftAgreementV2",
        "drive/permission/1NwContractsF0lder/06128374655", "drive/permission/1NwContractsF0lder/13370000424242",
        "slack/message/C07OPSDESK/1758525012.004100", "slack/message/C07OPSDESK/1758532468.009300",
    }
    folder = views_dir(Vault(example), SESSION)
    for r in views["resources"]:
        assert (folder / r["note"]).is_file()
    # freeBusy reads no resource and is listed as such in the index
    assert [e["seq"] for e in views["entries"] if not e["resources"]] == [6]
    index = (folder / "index.md").read_text()
    assert "[seq 6](timeline-0001.md#seq-6)" in index and "revert-plan.md" in index


def test_example_state_is_built_from_responses_with_sources_and_evidence(example):
    views = _views(example, SESSION)
    event = _resource(views, "calendar/event/primary/7kq2v0d1lf9mbm3cfd2a3n5u8c")
    # the last read is the agent's own report (seq 17): the view says so, field by field and in its evidence
    assert event["sources"]["start"] == 17 and event["state"]["start"]["dateTime"] == "2026-09-25T14:00:00+02:00"
    assert event["evidence"] == {"captures": {"agent": [17], "broker": [5, 7]}, "weakest": "agent"}
    # the write: before-state from seq 5, intended from the request, actual from the response, and the difference
    (patch,) = event["writes"]
    assert patch["seq"] == 7 and patch["before_seqs"] == [5]
    assert patch["before"]["start"]["dateTime"] == "2026-09-24T10:00:00+02:00"
    assert {"email": "legal@northwind"} in patch["intended"]["attendees"]
    (d,) = patch["differences"]
    assert d["field"] == "attendees" and d["kind"] == "differs" and d["missing"] == [{"email": "legal@northwind"}]
    message = _resource(views, "gmail/message/me/192a5f0c3e1d7b20")
    assert message["state"]["labelIds"] == ["INBOX", "IMPORTANT", "CATEGORY_UPDATES"]
    assert message["sources"]["labelIds"] == 4 and message["sources"]["snippet"] == 2
    assert message["description"] == "Revised services agreement + Thursday sync"
    history = _resource(views, "slack/message/C07OPSDESK/1758525012.004100")
    assert history["evidence"]["weakest"] == "gateway"  # seen only through the MCP gateway
    posted = _resource(views, "slack/message/C07OPSDESK/1758532468.009300")
    assert [w["op"] for w in posted["writes"]] == ["chat.postMessage", "reactions.add", "chat.update"]
    post = posted["writes"][0]
    assert post["differences"][0]["field"] == "channel" and post["differences"][0]["actual"] == "C07OPSDESK"


def test_example_revert_plan(example):
    plan = _plan(example, SESSION)
    assert plan["session"] == SESSION and plan["executed"] is False
    assert [s["for_seq"] for s in plan["steps"]] == [16, 15, 14, 13, 11, 10, 7, 4]  # every write, newest first
    for s in plan["steps"]:
        assert set(s) >= {"for_seq", "connector", "revertible", "blind", "approximate", "call", "reason"}
        assert s["trusted"] is True and s["capture"] == "broker" and s["reason"]
    st = _steps(plan)
    send = st[16]
    assert (send["revertible"], send["blind"], send["approximate"]) == (False, False, True)
    assert send["reason"].startswith("irreversible") and send["call"]["url"].endswith("/192a61b7d40c0e55/trash")
    assert st[15]["call"] == {"method": "POST", "url": "https://slack.com/api/chat.update", "body": {
        "channel": "C07OPSDESK", "ts": "1758532468.009300",
        "text": "Northwind sent contract v3; sync moved to Thu 14:00; folder shared with Priya."}}
    assert st[14]["call"]["url"].endswith("/reactions.remove") and st[14]["call"]["body"]["name"] == "white_check_mark"
    # the channel comes from the response (the request said #ops-desk)
    assert st[13]["call"]["body"] == {"channel": "C07OPSDESK", "ts": "1758532468.009300"}
    trash = st[11]
    assert (trash["revertible"], trash["blind"], trash["approximate"]) == (False, True, True)
    assert trash["call"] == {"method": "PATCH", "url": "https://www.googleapis.com/drive/v3/files/1OldDraftAgreementV2",
                             "body": {"trashed": False}}
    assert st[10]["call"]["method"] == "DELETE" and st[10]["call"]["url"].endswith(
        "/files/1NwContractsF0lder/permissions/13370000424242") and st[10]["revertible"]
    cal = st[7]
    assert cal["revertible"] and not cal["blind"] and cal["before_seqs"] == [5]
    assert cal["call"]["url"].endswith("/calendars/primary/events/7kq2v0d1lf9mbm3cfd2a3n5u8c?sendUpdates=all")
    assert cal["call"]["body"]["start"]["dateTime"] == "2026-09-24T10:00:00+02:00"
    assert len(cal["call"]["body"]["attendees"]) == 2
    assert st[4]["call"]["body"] == {"addLabelIds": ["UNREAD"], "removeLabelIds": []} and st[4]["revertible"]
    md = (views_dir(Vault(example), SESSION) / "revert-plan.md").read_text()
    assert "never executed" in md and md.index("## step-1") < md.index("## step-8")
    assert orjson.loads((views_dir(Vault(example), SESSION) / "revert-plan.json").read_bytes()) == plan


def test_example_notes_link_blobs_and_entries(example):
    folder = views_dir(Vault(example), SESSION)
    views = _views(example, SESSION)
    attachment = _resource(views, "gmail/attachment/me/192a5f0c3e1d7b20/ANGjdJ8vQ3")
    note = (folder / attachment["note"]).read_text()
    links = re.findall(r"\]\((\.\./\.\./blobs/sha256/[0-9a-f]{2}/[0-9a-f]{64})\)", note)
    assert links and all((folder / link).resolve().is_file() for link in links)
    assert attachment["state"]["data"]["ref"] in links[0]  # linked, never inlined
    assert len(note) < 10_000
    # every relative link in every note points at a file that exists (anchors checked on the timeline)
    timeline = (folder / "timeline-0001.md").read_text()
    for md in folder.glob("*.md"):
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", md.read_text()):
            assert (folder / target).exists(), (md.name, target)
        for anchor in re.findall(r"\]\(timeline-0001\.md#(seq-\d+)\)", md.read_text()):
            assert f"\n### {anchor}\n" in timeline


def test_replay_is_deterministic_and_rebuildable(example):
    folder = views_dir(Vault(example), SESSION)
    first = _tree(folder)
    assert "views.json" in first and "index.md" in first
    vault = Vault.open_existing(example)
    write_outputs(vault, replay_session(vault, SESSION))
    assert _tree(folder) == first
    shutil.rmtree(folder)
    write_outputs(vault, replay_session(vault, SESSION))
    assert _tree(folder) == first


# -- CLI --------------------------------------------------------------------------------------------------


def test_cli_replay_and_revert_plan(tmp_path):
    copy_example(tmp_path / "v")
    out = broker("replay", "--vault", str(tmp_path / "v"), SESSION, "--json")
    assert out.returncode == 0, out.stderr
    summary = orjson.loads(out.stdout)
    assert summary["intact"] and summary["resources"] == 11 and summary["writes"] == 8 and summary["plan_steps"] == 8
    folder = Path(summary["views"])
    first = _tree(folder)
    shutil.rmtree(folder)  # another process with another hash seed gives the same bytes
    again = broker("replay", "--vault", str(tmp_path / "v"), SESSION, env=os.environ | {"PYTHONHASHSEED": "4242"})
    assert again.returncode == 0 and _tree(folder) == first
    plan = broker("revert-plan", "--vault", str(tmp_path / "v"), SESSION, "--json")
    assert plan.returncode == 0, plan.stderr
    data = orjson.loads(plan.stdout)
    assert data["session"] == SESSION and len(data["steps"]) == 8 and data["steps"][0]["for_seq"] == 16
    text = broker("revert-plan", "--vault", str(tmp_path / "v"), SESSION)
    assert text.returncode == 0 and "never executed" in text.stdout and "NOT revertible" in text.stdout
    missing = broker("replay", "--vault", str(tmp_path / "v"), "no-such-session")
    assert missing.returncode == 2 and "no session" in missing.stderr and "Traceback" not in missing.stderr
    novault = broker("revert-plan", "--vault", str(tmp_path / "nowhere"), SESSION)
    assert novault.returncode == 2 and "Traceback" not in novault.stderr


# -- synthetic sessions, one per connector ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synthetic") / "v"
    for build in (rf.gmail_session, rf.calendar_session, rf.drive_session, rf.slack_session, rf.github_session,
                  rf.generic_session):
        build(root)
    return root


def test_gmail(synthetic):
    st = _steps(_plan(synthetic, "gmail"))
    label = st[2]  # modify with a before read: exact, from the before labelIds
    assert label["revertible"] and not label["blind"] and label["before_seqs"] == [1]
    assert label["call"]["body"] == {"addLabelIds": ["UNREAD"], "removeLabelIds": ["STARRED"]}
    blind = st[3]  # never read: the swapped call, approximate
    assert (blind["revertible"], blind["blind"], blind["approximate"]) == (False, True, True)
    assert blind["call"]["body"] == {"addLabelIds": ["INBOX"], "removeLabelIds": ["Label_7"]}
    assert st[4]["call"]["url"] == f"{GMAIL_MSG}/m1/untrash" and st[4]["revertible"]
    assert st[5]["blind"] and st[5]["approximate"] and st[5]["call"]["url"] == f"{GMAIL_MSG}/m3/untrash"
    assert st[6]["call"]["url"] == f"{GMAIL_MSG}/m4/trash" and not st[6]["blind"]  # insert: created, not blind
    assert st[7]["call"] == {"method": "DELETE", "url": "https://gmail.googleapis.com/gmail/v1/users/me/labels/Label_9",
                             "body": None}
    assert st[9]["call"]["body"] == {"name": "Old"}  # label patch back
    assert st[10]["approximate"] and st[10]["call"]["body"]["name"] == "Archive 2025"  # label delete: re-create
    assert st[11]["reason"].startswith("irreversible") and not st[11]["revertible"]  # send
    failed = st[12]
    assert failed["call"] is None and "failed write (HTTP 404)" in failed["reason"] and not failed["revertible"]
    assert st[14]["reason"].startswith("irreversible") and st[14]["call"] is None  # permanent delete
    thread = st[16]  # labels live on a thread's messages: restored from them, approximate
    assert thread["resource"] == "gmail/thread/me/t7" and thread["approximate"] and not thread["blind"]
    assert thread["call"]["url"] == "https://gmail.googleapis.com/gmail/v1/users/me/threads/t7/modify"
    assert thread["call"]["body"] == {"addLabelIds": ["INBOX"], "removeLabelIds": []}
    views = _views(synthetic, "gmail")
    m1 = _resource(views, "gmail/message/me/m1")
    differs = next(w for w in m1["writes"] if w["seq"] == 13)["differences"]
    assert differs[0]["field"] == "labelIds" and differs[0]["missing"] == ["IMPORTANT"]
    assert m1["status"] == "trashed"
    m7 = _resource(views, "gmail/message/me/m7")
    assert m7["parent"] == "gmail/thread/me/t7" and m7["state"]["labelIds"] == ["UNREAD"]
    assert [w["role"] for w in m7["writes"]] == ["side"]


def test_calendar(synthetic):
    st = _steps(_plan(synthetic, "calendar"))
    patch = st[2]  # the principal's address is the same calendar as primary
    assert patch["resource"] == "calendar/event/primary/ev1" and patch["before_seqs"] == [1]
    assert patch["call"]["body"] == {"colorId": None, "summary": "Sync"}
    create = st[3]
    assert create["call"]["method"] == "DELETE" and create["call"]["url"].endswith("/events/ev2?sendUpdates=all")
    delete = st[4]  # deleted: restored by status confirmed on the same id
    assert delete["revertible"] and delete["call"] == {
        "method": "PATCH", "url": "https://www.googleapis.com/calendar/v3/calendars/primary/events/ev1",
        "body": {"status": "confirmed"}}
    assert st[5]["blind"] and st[5]["approximate"] and st[5]["call"]["body"] == {"status": "confirmed"}
    update = st[6]  # PUT back the before event without read-only fields
    assert update["call"]["method"] == "PUT" and update["call"]["body"]["summary"] == "Kickoff"
    assert "etag" not in update["call"]["body"] and "id" not in update["call"]["body"]
    assert "HTTP 403" in st[7]["reason"] and st[7]["call"] is None
    assert 8 not in st  # freeBusy is a read
    # field-by-field merge: the PUT's answer (seq 6) had no attendees, so the create's (seq 3) still stand
    assert st[9]["call"]["body"] == {"attendees": [{"email": "bob@example.com", "responseStatus": "needsAction"}]}
    assert st[9]["before_seqs"] == [3, 6]
    move = st[10]
    assert move["revertible"] and move["call"]["url"] == (
        "https://www.googleapis.com/calendar/v3/calendars/team@group.calendar.google.com/events/ev2/move"
        "?destination=primary")
    assert st[11]["reason"].startswith("irreversible") and st[11]["call"] is None
    views = _views(synthetic, "calendar")
    assert _resource(views, "calendar/event/primary/ev1")["status"] == "cancelled"
    ev2 = _resource(views, "calendar/event/primary/ev2")
    (d,) = next(w for w in ev2["writes"] if w["seq"] == 9)["differences"]
    assert d["field"] == "attendees" and d["missing"] == [{"email": "not-an-address"}]
    assert ev2["status"] == "moved to team@group.calendar.google.com"
    moved = _resource(views, "calendar/event/team@group.calendar.google.com/ev2")
    assert [w["role"] for w in moved["writes"]] == ["side"]


def test_drive(synthetic):
    st = _steps(_plan(synthetic, "drive"))
    assert st[2]["revertible"] and st[2]["call"]["body"] == {"trashed": False}  # trash, before known
    assert st[3]["blind"] and st[3]["approximate"] and not st[3]["revertible"]  # blind trash
    assert st[4]["reason"].startswith("irreversible") and "skips the trash" in st[4]["reason"]  # permanent delete
    assert st[5]["call"] == {"method": "PATCH", "url": "https://www.googleapis.com/drive/v3/files/f4",
                             "body": {"trashed": True}}
    move = st[6]
    assert move["call"]["url"] == ("https://www.googleapis.com/drive/v3/files/f1"
                                   "?removeParents=folderB&addParents=folderA")
    assert move["call"]["body"] == {"description": "draft"}
    perm = st[7]  # permission delete: re-create from the file read's permissions, no email
    assert perm["revertible"] and perm["before_seqs"] == [1]
    assert perm["call"]["url"].endswith("/files/f1/permissions?sendNotificationEmail=false")
    assert perm["call"]["body"] == {"type": "user", "role": "reader", "emailAddress": "carol@example.com"}
    assert "cannot be recalled" in st[8]["reason"]
    assert st[9]["call"]["body"] == {"role": "writer"}
    assert st[10]["reason"].startswith("irreversible") and "emptyTrash" in st[10]["reason"]
    assert "HTTP 404" in st[11]["reason"]
    views = _views(synthetic, "drive")
    p2 = _resource(views, "drive/permission/f1/p2")
    assert p2["parent"] == "drive/file/f1"
    diffs = next(w for w in p2["writes"] if w["seq"] == 9)["differences"]
    assert diffs == [{"field": "role", "kind": "differs", "intended": "commenter", "actual": "reader"}]
    create = next(w for w in p2["writes"] if w["seq"] == 8)["differences"]
    assert create[0]["field"] == "emailAddress" and create[0]["kind"] == "unconfirmed"  # partial response


def test_slack(synthetic):
    st = _steps(_plan(synthetic, "slack"))
    assert st[1]["call"]["body"] == {"channel": "C1", "ts": "1700000000.000100"}  # form body, channel from response
    react = st[2]  # the request named #general: resolved to C1 through the earlier post
    assert react["resource"] == "slack/message/C1/1700000000.000100"
    assert react["call"]["url"] == "https://slack.com/api/reactions.remove" and react["revertible"]
    assert st[3]["call"]["body"]["text"] == "hello" and st[3]["before_seqs"] == [1]
    assert st[4]["blind"] and st[4]["call"] is None  # blind chat.update
    assert st[6]["reason"].startswith("irreversible") and st[6]["call"]["body"] == {"channel": "C3",
                                                                                  "text": "keep me"}
    failed = st[7]  # HTTP 200 with ok: false
    assert failed["op"] == "chat.postMessage" and "channel_not_found" in failed["reason"] and failed["call"] is None
    assert st[8]["call"]["url"].endswith("/reactions.add")
    mcp = st[9]  # through an MCP gateway: capture grade gateway
    assert mcp["capture"] == "gateway" and mcp["evidence"] == "gateway"
    assert mcp["call"]["body"] == {"channel": "C1", "ts": "1700000000.000500"}


def test_github(synthetic):
    st = _steps(_plan(synthetic, "github"))
    assert st[2]["call"]["body"] == {"state": "open", "title": "Crash on start"} and st[2]["revertible"]
    assert st[3]["approximate"] and st[3]["call"]["body"] == {"state": "closed", "state_reason": "not_planned"}
    assert st[4]["call"] == {"method": "DELETE", "url": "https://api.github.com/repos/acme/widgets/issues/comments/501",
                             "body": None}
    assert st[5]["call"] == {"method": "PUT", "url": "https://api.github.com/repos/acme/widgets/issues/7/labels",
                             "body": {"labels": ["bug"]}}
    assert st[6]["blind"] and st[6]["approximate"] and st[6]["call"]["body"] == {"labels": ["p1"]}
    assert st[7]["call"]["url"].endswith("/issues/7/reactions/900")
    assert st[9]["call"]["body"] == {"body": "old text"}
    assert st[10]["approximate"] and st[10]["call"]["url"].endswith("/issues/5/comments")
    assert st[11]["reason"].startswith("irreversible")  # merge
    assert "HTTP 404" in st[12]["reason"]
    gql = st[13]
    assert gql["call"]["url"] == "https://api.github.com/graphql"
    assert "removeReaction" in gql["call"]["body"]["query"]
    assert gql["call"]["body"]["variables"] == {"input": {"subjectId": "I_7", "content": "HEART"}}
    assert st[14]["call"] is None and "already existed" in st[14]["reason"]
    assert st[15]["call"]["body"] == {"state": "open", "title": "New idea"}  # before: the create's answer (seq 3)
    views = _views(synthetic, "github")
    issue8 = _resource(views, "github/issue/acme/widgets/8")
    (d,) = next(w for w in issue8["writes"] if w["seq"] == 15)["differences"]
    assert d == {"field": "state", "kind": "differs", "intended": "closed", "actual": "open"}


def test_generic_rest_fallback(synthetic):
    st = _steps(_plan(synthetic, "jira"))
    base = "https://acme.atlassian.net/rest/api/3/issue"
    assert st[2]["call"]["method"] == "PUT" and st[2]["call"]["body"]["fields"] == {"summary": "Old"}
    assert st[3]["call"] == {"method": "DELETE", "url": f"{base}/10002", "body": None}  # child id from response
    assert st[4]["call"]["body"] == {"priority": None}
    assert st[5]["approximate"] and st[5]["call"]["method"] == "PUT"
    assert st[6]["blind"] and st[6]["call"] is None
    assert st[7]["call"] is None and "no id" in st[7]["reason"]
    assert "HTTP 400" in st[8]["reason"]
    views = _views(synthetic, "jira")
    patch = next(w for w in _resource(views, "jira/resource/acme.atlassian.net/rest/api/3/issue/PRJ-1")["writes"]
                 if w["seq"] == 4)
    assert patch["differences"][0] == {"field": "priority", "kind": "differs", "intended": "High", "actual": "Low"}


def test_every_connector_module_has_the_interface():
    mods = modules()
    assert {"gmail", "calendar", "drive", "slack", "github", "generic"} <= set(mods)
    for name, mod in mods.items():
        assert mod.NAME == name and callable(mod.touches) and callable(mod.invert) and mod.__doc__


# -- broken chains ---------------------------------------------------------------------------------------------


def _tamper(root: Path, session: str, line: int, old: bytes, new: bytes) -> None:
    path = Vault(root).session_path(session)
    lines = path.read_bytes().splitlines(keepends=True)
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    path.write_bytes(b"".join(lines))


def test_broken_chain_marks_everything_from_the_broken_seq_untrusted(tmp_path):
    root = tmp_path / "v"
    copy_example(root)
    _tamper(root, SESSION, 10, b'"role":"writer"', b'"role":"owner"')
    vault = Vault.open_existing(root)
    rp = replay_session(vault, SESSION)
    assert not rp.intact and rp.untrusted_from == 10 and len(rp.entries) == 17
    folder, _ = write_outputs(vault, rp)
    plan = plan_dict(rp)
    assert plan["chain"]["broken_at_seq"] == 10 and plan["chain"]["kind"] == "edited"
    for s in plan["steps"]:
        assert s["trusted"] is (s["for_seq"] < 10)
        assert s["reason"].startswith("UNTRUSTED") is (s["for_seq"] >= 10)
    views = _views(root, SESSION)
    assert [e["seq"] for e in views["entries"] if not e["trusted"]] == list(range(10, 18))
    assert _resource(views, "drive/permission/1NwContractsF0lder/13370000424242")["trusted"] is False
    assert _resource(views, "gmail/message/me/192a5f0c3e1d7b20")["trusted"] is True
    for md in folder.glob("*.md"):  # every output says so
        assert "Chain broken at seq 10" in md.read_text(), md.name
    out = broker("replay", "--vault", str(root), SESSION)
    assert out.returncode == 1 and "UNTRUSTED" in out.stdout
    with pytest.raises(BrokenChainError):
        replay_session(vault, SESSION, require_intact=True)
    refused = broker("revert-plan", "--vault", str(root), SESSION, "--require-intact")
    assert refused.returncode == 1 and "refused" in refused.stderr


def test_an_entry_edited_with_its_hash_recomputed_is_untrusted_from_its_own_seq(tmp_path):
    """The verifier reports such a break at the edited entry (its own line holds; the next line's prev no
    longer names it), after replay folded that entry as trusted: replay folds again, marking it and every
    later entry untrusted, each at its own line (this used to stop replay with a duplicate line)."""
    from journal.chain import chain_entry

    root = copy_example(tmp_path / "v")
    path = Vault(root).session_path(SESSION)
    lines = path.read_bytes().splitlines(keepends=True)
    entry = orjson.loads(lines[9])
    fields = {k: v for k, v in entry.items() if k not in ("seq", "prev", "hash")} | {"agent": "someone-else"}
    lines[9] = chain_entry(fields, entry["seq"], entry["prev"])[1]
    path.write_bytes(b"".join(lines))
    vault = Vault.open_existing(root)
    rp = replay_session(vault, SESSION)
    assert rp.report.kind == "edited" and rp.report.broken_at_seq == 10 and rp.untrusted_from == 10
    assert [(e.pos, e.seq, e.trusted) for e in rp.entries] == [(n, n, n < 10) for n in range(1, 18)]
    folder, _ = write_outputs(vault, rp)
    assert "Chain broken at seq 10 (edited)" in (folder / "index.md").read_text()


def test_removed_entry_and_torn_tail(tmp_path):
    root = tmp_path / "v"
    copy_example(root)
    path = Vault(root).session_path(SESSION)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5] + lines[6:15]) + lines[15][:40])  # seq 6 removed, torn last line
    vault = Vault.open_existing(root)
    rp = replay_session(vault, SESSION)
    assert rp.report.kind == "removed" and rp.untrusted_from == 6
    assert [(e.pos, e.seq) for e in rp.entries if not e.trusted][:2] == [(6, 7), (7, 8)]
    assert rp.unreadable and rp.unreadable[-1][0] == 15  # the torn line
    folder, _ = write_outputs(vault, rp)
    assert "line 15" in (folder / "index.md").read_text()


# -- spilled content, names, Markdown safety ---------------------------------------------------------------------


def test_replay_never_opens_blobs(tmp_path, monkeypatch):
    """Only the verifier touches blobs (streaming its hash check); replay works from references alone."""
    root = tmp_path / "v"
    copy_example(root)
    for blob in (root / "blobs" / "sha256").rglob("*"):
        if blob.is_file():
            blob.chmod(0o644)
            blob.unlink()
    vault = Vault.open_existing(root)
    rp = replay_session(vault, SESSION)
    assert rp.report.kind == "blob_missing"  # the verifier noticed
    from journal.replay import fold

    rp = fold.fold_session(vault, SESSION, check_blobs=False)
    assert rp.intact
    folder, _ = write_outputs(vault, rp)
    assert "../../blobs/sha256/" in (folder / note_name(("gmail", "attachment", "me", "192a5f0c3e1d7b20",
                                                         "ANGjdJ8vQ3"))).read_text()


def test_spilled_bodies_are_linked_never_inlined(tmp_path):
    content = bytes(range(256)) * 64  # 16 KiB of binary: spilled above the test threshold
    with rf.SessionBuilder(tmp_path / "v", "spill", spill_threshold=4096) as s:
        s.get(f"{rf.DRIVE}/files/f1?alt=media", resp_raw=content, resp_type="application/octet-stream")
        s.call("PATCH", "https://www.googleapis.com/upload/drive/v3/files/f1?uploadType=media",
               {"id": "f1", "headRevisionId": "r2"}, resp_type="application/json",
               headers=[("Content-Type", "application/octet-stream")])
    vault = Vault.open_existing(tmp_path / "v")
    rp = replay_session(vault, "spill")
    folder, _ = write_outputs(vault, rp)
    ref = rp.resources[("drive", "file", "f1")].state["content"]
    assert ref["size"] == len(content) and ref["ref"].startswith("blobs/sha256/")
    note = (folder / note_name(("drive", "file", "f1"))).read_text()
    assert f"(../../{ref['ref']})" in note and (folder / f"../../{ref['ref']}").resolve().is_file()
    assert len(note) < 8000
    (step,) = plan_dict(rp)["steps"]  # re-upload the captured content: the body is the blob's bytes
    assert step["call"]["url"].endswith("/upload/drive/v3/files/f1?uploadType=media") and step["call"]["body"] == ref
    assert "blob" in step["reason"]


def test_note_names_are_safe_bounded_and_distinct():
    names = [note_name(k) for k in [
        ("generic", "resource", "host/../../etc/passwd"), ("x", "y", "\x00\n/..\\"), ("gmail", "message", "me", "A"),
        ("gmail", "message", "me", "a"), ("g", "k", "é" * 300), (".hidden", "k", ".."),
    ]]
    assert len(set(names)) == len(names) and len({n.lower() for n in names}) == len(names)
    for n in names:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*-[0-9a-f]{10}\.md", n) and len(n) <= 100, n


def test_journal_text_cannot_inject_markdown(tmp_path):
    with rf.SessionBuilder(tmp_path / "v", "inject") as s:
        s.post(f"{rf.SLACK}/chat.postMessage", {"channel": "C1", "text": "[click](https://evil.example) <img src=x>"},
               {"ok": True, "channel": "C1", "ts": "1.2", "message": {"text": "[click](https://evil.example) "
                                                                              "<img src=x>\n# heading"}})
    vault = Vault.open_existing(tmp_path / "v")
    folder, _ = write_outputs(vault, replay_session(vault, "inject"))
    for md in folder.glob("*.md"):
        prose = re.sub(r"(?ms)^(`{3,}).*?^\1$", "", md.read_text())  # fenced blocks are inert
        prose = re.sub(r"(`+).*?\1", "", prose)  # and so are code spans
        assert "evil.example" not in prose.replace("\\]\\(https://evil.example\\)", "")
        assert "<img" not in prose and "\n# heading" not in prose
    assert esc("[a](b) <x> | # y") == "\\[a\\]\\(b\\) &lt;x&gt; \\| \\# y"
    assert code("a`b|c") == "``a`b\\|c``"


def test_stale_files_of_an_earlier_replay_are_removed_but_others_kept(tmp_path):
    with rf.SessionBuilder(tmp_path / "v", "s") as s:
        s.get(f"{GMAIL_MSG}/m1", {"id": "m1", "labelIds": ["INBOX"]})
    vault = Vault.open_existing(tmp_path / "v")
    folder, files = write_outputs(vault, replay_session(vault, "s"))
    views = orjson.loads((folder / "views.json").read_bytes())
    views["files"].append("old-note-0123456789.md")
    (folder / "views.json").write_bytes(orjson.dumps(views))
    (folder / "old-note-0123456789.md").write_text("stale")
    (folder / "my-own-notes.md").write_text("mine")
    _, again = write_outputs(vault, replay_session(vault, "s"))
    assert again == files and not (folder / "old-note-0123456789.md").exists()
    assert (folder / "my-own-notes.md").read_text() == "mine"


def test_session_ids_map_to_a_folder_inside_views(tmp_path):
    with rf.SessionBuilder(tmp_path / "v", "../evil/ session") as s:
        s.get(f"{GMAIL_MSG}/m1", {"id": "m1"})
    vault = Vault.open_existing(tmp_path / "v")
    folder, _ = write_outputs(vault, replay_session(vault, "../evil/ session"))
    assert folder.parent == vault.views_dir and "/" not in folder.name and not folder.name.startswith(".")


def test_seal_mismatch_found_after_the_pass(tmp_path):
    from journal.chain import chain_entry
    from journal.seal import generate_keypair, load_private_key, load_public_key, write_seal

    root = tmp_path / "v"
    copy_example(root)
    generate_keypair(tmp_path / "seal.pem", tmp_path / "seal.pub")
    vault = Vault.open_existing(root)
    path = vault.session_path(SESSION)
    lines = path.read_bytes().splitlines(keepends=True)
    write_seal(vault, SESSION, 17, orjson.loads(lines[16])["hash"], load_private_key(tmp_path / "seal.pem"))
    public = load_public_key(tmp_path / "seal.pub")
    assert replay_session(vault, SESSION, seal_key=public).intact
    # a rewrite with every hash recomputed: the chain holds, the seal does not
    entries = [orjson.loads(line) for line in lines]
    entries[15]["request"]["body"]["raw"] = "cmV3cml0dGVu"
    prev, out = entries[14]["hash"], lines[:15]
    for e in entries[15:]:
        fields = {k: v for k, v in e.items() if k not in ("seq", "prev", "hash")}
        chained, line = chain_entry(fields, e["seq"], prev)
        prev = chained["hash"]
        out.append(line)
    path.write_bytes(b"".join(out))
    assert replay_session(vault, SESSION).intact  # without the key nothing shows it
    rp = replay_session(vault, SESSION, seal_key=public)
    assert rp.report.kind == "seal_mismatch" and rp.untrusted_from == rp.report.broken_at_seq == 17
    assert [e.pos for e in rp.entries if not e.trusted] == [17] and len(rp.entries) == 17
    # entries cut off at the end: nothing in the file is untrusted, every output still says it is broken
    path.write_bytes(b"".join(lines[:15]))
    rp = replay_session(vault, SESSION, seal_key=public)
    assert rp.report.kind == "seal_mismatch" and rp.untrusted_from == 16 and all(e.trusted for e in rp.entries)
    folder, _ = write_outputs(vault, rp)
    assert "Chain broken at seq 16 (seal\\_mismatch)" in (folder / "index.md").read_text()
    out = broker("revert-plan", "--vault", str(root), SESSION, "--seal-key", str(tmp_path / "seal.pub"), "--json")
    assert out.returncode == 1 and orjson.loads(out.stdout)["chain"]["kind"] == "seal_mismatch"


def test_mcp_tool_calls_without_an_api_mapping_are_listed_not_guessed(tmp_path):
    with rf.SessionBuilder(tmp_path / "v", "mcp") as s:
        s.mcp_tool("notes", "add_note", {"text": "hi"}, {"id": 1}, effect="write", server="http://127.0.0.1:9/mcp")
        s.mcp_tool("notes", "add_note", {"text": "x"}, {"error": "full"}, effect="write", is_error=True)
    vault = Vault.open_existing(tmp_path / "v")
    rp = replay_session(vault, "mcp")
    folder, _ = write_outputs(vault, rp)
    plan = plan_dict(rp)
    first, second = plan["steps"][1], plan["steps"][0]
    assert first["op"] == "add_note" and first["call"] is None and first["blind"] and "MCP tool call" in first["reason"]
    assert first["capture"] == "gateway" and rp.entries[0].method == "tools/call"
    assert "failed write (the MCP tool reported an error)" in second["reason"]
    assert "seq-1" in (folder / "timeline-0001.md").read_text() and not rp.resources


# -- bounded memory: the spill store -----------------------------------------------------------------------------


def test_the_plan_alone_without_a_fork_and_with_a_one_resource_cache_gives_the_same_plan(tmp_path, monkeypatch):
    """The fold for the plan alone (what revert-plan and the inspector's plan tab use), forked or serial,
    gives the plan of the full replay; the full replay's views are the same bytes with or without a fork,
    and whether resources stay objects or are frozen and thawed at every touch."""
    from journal.replay import forked
    from journal.replay.fold import Folder

    trees, plans = [], []
    for enabled in (True, False):
        monkeypatch.setattr(forked, "ENABLED", enabled)
        monkeypatch.setattr(Folder, "CACHE", Folder.CACHE if enabled else 1)  # every resource frozen and thawed
        root = copy_example(tmp_path / f"v{enabled}")
        vault = Vault.open_existing(root)
        rp = replay_session(vault, SESSION)
        folder, _ = write_outputs(vault, rp)
        trees.append(_tree(folder))
        plans += [plan_dict(rp), plan_dict(replay_session(vault, SESSION, views=False))]
    assert trees[0] == trees[1] and all(p == plans[0] for p in plans)
    assert len(trees[0]) == 16  # 11 notes, 1 timeline page, index, plan (md, json), views.json


def test_the_spill_store_lives_beside_the_views_and_is_removed(tmp_path):
    import gc

    root = copy_example(tmp_path / "v")
    vault = Vault.open_existing(root)
    rp = replay_session(vault, SESSION)
    scratch = rp.store.dir
    assert scratch.parent == vault.views_dir and scratch.name.startswith(".replay-")
    assert (scratch / "replay.sqlite").is_file()
    assert len(rp.entries) == 17 and rp.entries[-1].pos == 17 and len(rp.steps) == 8
    assert ("drive", "file", "1OldDraftAgreementV2") in rp.resources and ("drive", "file", "nope") not in rp.resources
    write_outputs(vault, rp)
    rp.close()
    assert not scratch.exists()
    rp = replay_session(vault, SESSION)  # dropped without close(): collected, the folder goes too
    scratch = rp.store.dir
    del rp
    gc.collect()
    assert not scratch.exists()
    assert [p.name for p in vault.views_dir.iterdir()] == [views_dir(vault, SESSION).name]


@pytest.mark.usefixtures("only_main_thread")
def test_the_split_fold_is_kept_and_the_smaller_share_saves_before_the_partner_is_done(tmp_path, monkeypatch):
    """The fold split between two processes (split.py) is kept, not refused for a resource saved twice and folded
    again serially (which would give the same bytes, only slower): the parent's share writes its resource rows
    once, before it takes the partner's share, and `finish` absorbs the partner."""
    from bench.replay_bench import SESSION as BENCH
    from bench.replay_bench import build_session
    from journal.forked_call import ForkedCall
    from journal.replay import fold

    build_session(tmp_path / "v", 1500, 100)
    events: list[str] = []
    real_save, real_finish, real_result = fold.Folder._write_resources, fold.Folder.finish, ForkedCall.result
    monkeypatch.setattr(fold.Folder, "_write_resources", lambda self: events.append("save") or real_save(self))
    monkeypatch.setattr(fold.Folder, "finish", lambda self, report, partner=None:
                        events.append(f"finish partner={partner is not None}") or real_finish(self, report, partner))
    monkeypatch.setattr(ForkedCall, "result", lambda self: events.append("result") or real_result(self))
    rp = replay_session(Vault.open_existing(tmp_path / "v"), BENCH)
    try:
        assert rp.intact and rp.counts.entries == 1500
        assert events == ["save", "result", "result", "finish partner=True"]  # the partner's, then the verifier's
    finally:
        rp.close()
