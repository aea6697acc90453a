"""The whole of MCP in the record (issue 25): task results, cancelled calls on every transport,
prompts, sampling and elicitation with their answers, tool errors, tool names in every listing, and
no server outliving the shim. Raw wire tests for exact shapes, the SDK client for the real thing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CreateMessageResult, ElicitResult, ListRootsResult, Root, TextContent

from tests.support.mcp_servers.harness import (
    NOTES_SERVER,
    PY,
    REPO,
    WAIT,
    RawShim,
    assert_intact,
    entries,
    free_port,
    shim_argv,
    wait_for_port,
)

pytestmark = pytest.mark.e2e
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token shape the redaction rules know
TOOL_ERROR = "tool error: the result has isError: true"


def _wait(predicate, what: str) -> None:
    """Poll until `predicate()` holds (bounded by WAIT so a broken build fails instead of hanging)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting: {what}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its new parent) is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _vault_bytes(vault: Path) -> bytes:
    return b"".join(p.read_bytes() for p in vault.rglob("*") if p.is_file())


# -- raw wire (stdio) -----------------------------------------------------------------------------


def test_tool_error_prompt_and_tool_names_on_the_wire(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(1, "fail", reason="disk full")
        assert shim.recv_json()["result"]["isError"] is True
        shim.send({"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "hi", "arguments": {
            "who": "bob " + SECRET}}})
        assert shim.recv_json()["result"]["messages"][0]["content"]["text"].startswith("hello bob")
        shim.call(3, "echo", text="fine")
        assert shim.recv_json()["id"] == 3
        assert shim.close() == 0
    finally:
        shim.kill()
    assert_intact(shim.vault)
    failed, prompt, fine = entries(shim.vault)
    # a tool error is the server's answer (status 200, answered by upstream) and says it is an error
    assert failed["response"]["status"] == 200 and failed["response"]["answered_by"] == "upstream"
    assert failed["response"]["error"] == TOOL_ERROR
    assert "error" not in fine["response"]
    # prompts/get: what the model reads, a read, redacted like everything else
    assert prompt["request"]["method"] == "prompts/get" and prompt["effect"] == "read"
    assert prompt["request"]["effect_basis"] == "rule"
    assert prompt["response"]["body"]["result"]["messages"][0]["content"]["text"].startswith("hello bob")
    assert SECRET.encode() not in _vault_bytes(shim.vault)
    # every listing names the tool, not only tools/call and the command line
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    show = subprocess.run([PY, "-m", "broker.cli", "show", "--vault", str(shim.vault), "s1"], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=WAIT)
    assert show.returncode == 0, show.stderr
    lines = [ln for ln in show.stdout.splitlines() if "tools/call" in ln or "prompts/get" in ln]
    assert any("tools/call fail" in ln and "tool error" in ln for ln in lines), show.stdout
    assert any("tools/call echo" in ln for ln in lines) and any("prompts/get hi" in ln for ln in lines)
    found = subprocess.run([PY, "-m", "broker.cli", "search", "--vault", str(shim.vault), "--session", "s1"],
                           capture_output=True, text=True, cwd=REPO, env=env, timeout=WAIT)
    assert found.returncode == 0, found.stderr
    assert "tools/call fail" in found.stdout and "tool error" in found.stdout


def test_sampling_and_elicitation_are_recorded_with_their_answers(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(1, "ask")
        ask = shim.recv_json()
        assert ask["method"] == "sampling/createMessage"
        reply = {"jsonrpc": "2.0", "id": ask["id"], "result": {"role": "assistant", "model": "m", "content": {
            "type": "text", "text": "here is " + SECRET}}}
        shim.send(reply)
        assert shim.recv_json()["id"] == 1
        shim.call(2, "elicit")
        ask = shim.recv_json()
        assert ask["method"] == "elicitation/create"
        shim.send({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"ok": True}}})
        assert shim.recv_json()["id"] == 2
        assert shim.close() == 0
    finally:
        shim.kill()
    assert_intact(shim.vault)
    got = entries(shim.vault, asks=True)
    assert [e["request"]["method"] for e in got] == [
        "sampling/createMessage", "tools/call", "elicitation/create", "tools/call"]
    sampling, _, elicitation, _ = got
    for e, server_id in ((sampling, "s-1"), (elicitation, "e-1")):
        assert e["effect"] == "read" and e["request"]["effect_basis"] == "rule"
        assert e["capture"] == "gateway" and e["connector"] == "raw-server"
        assert e["mcp"]["id"] == server_id and e["mcp"]["method"] == e["request"]["method"]
        assert e["request"]["body"] == e["mcp"]["params"]
        assert e["response"]["status"] == 200 and e["response"]["answered_by"] == "upstream"
        assert e["response"]["body"]["id"] == server_id
    assert elicitation["response"]["body"]["result"] == {"action": "accept", "content": {"ok": True}}
    assert sampling["response"]["body"]["result"]["content"]["text"].startswith("here is ")
    assert SECRET.encode() not in _vault_bytes(shim.vault)  # the one redaction path, on the client's answer too


def test_unanswered_server_request_keeps_its_entry(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.call(1, "ask")
        assert shim.recv_json()["method"] == "sampling/createMessage"
        assert shim.close() == 0  # the client leaves without answering
    finally:
        shim.kill()
    got = {e["request"]["method"]: e for e in entries(shim.vault, asks=True)}
    ask = got["sampling/createMessage"]
    assert ask["response"]["status"] is None and ask["response"]["answered_by"] == "none"
    assert "went away" in ask["response"]["error"]
    assert_intact(shim.vault)


def _task_call(rid: object, tool: str, **arguments: object) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "task": {"ttl": 60000}}}


def test_task_result_is_recorded_and_tied_to_its_call(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.send(_task_call(1, "send_mail", text="sent it"))
        created = shim.recv_json()["result"]["task"]
        assert created["status"] == "completed" and created["taskId"] == "task-1"
        shim.send({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": "task-1"}})
        assert shim.recv_json()["result"]["status"] == "completed"
        shim.send({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": "task-1"}})
        assert shim.recv_json()["result"]["content"][0]["text"] == "sent it"
        assert shim.close() == 0
    finally:
        shim.kill()
    assert_intact(shim.vault)
    call, status, result = entries(shim.vault)
    assert call["request"]["method"] == "tools/call" and call["effect"] == "write"
    assert call["response"]["body"]["result"]["task"]["taskId"] == "task-1"
    for e in (status, result):
        # tied to the call that created the task, and as much a write as that call
        assert e["request"]["task_of"] == f"s1#{call['seq']}"
        assert e["effect"] == "write" and e["request"]["effect_basis"] == call["request"]["effect_basis"]
        assert e["response"]["answered_by"] == "upstream"
    assert status["request"]["method"] == "tasks/get"
    assert result["request"]["method"] == "tasks/result"
    assert result["response"]["body"]["result"]["content"][0]["text"] == "sent it"


def test_task_cancel_is_recorded(tmp_path: Path) -> None:
    shim = RawShim(tmp_path)
    try:
        shim.handshake()
        shim.send(_task_call(1, "hold"))
        assert shim.recv_json()["result"]["task"]["status"] == "working"
        shim.send({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": "task-1"}})
        assert shim.recv_json()["result"]["status"] == "working"
        shim.send({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": "task-1"}})
        shim.send({"jsonrpc": "2.0", "id": 4, "method": "tasks/cancel", "params": {"taskId": "task-1"}})
        answers = {m["id"]: m for m in (shim.recv_json(), shim.recv_json())}
        assert answers[4]["result"]["status"] == "cancelled" and "error" in answers[3]
        assert shim.close() == 0
    finally:
        shim.kill()
    assert_intact(shim.vault)
    got = entries(shim.vault)
    methods = [e["request"]["method"] for e in got]
    # a poll that says "working" tells nothing new: only the call, the cancel and the result's end
    assert methods == ["tools/call", "tasks/cancel", "tasks/result"]
    call, cancel, result = got
    assert cancel["request"]["task_of"] == result["request"]["task_of"] == f"s1#{call['seq']}"
    assert cancel["response"]["body"]["result"]["status"] == "cancelled"
    assert result["response"]["body"]["error"]["message"] == "task cancelled"


def test_cancelled_call_on_stdio_says_cancelled(tmp_path: Path) -> None:
    shim = RawShim(tmp_path, "--cancel-grace", "0.2")
    try:
        shim.handshake()
        shim.call(1, "hold")
        shim.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        _wait(lambda: len(entries(shim.vault)) == 1, "the cancelled call's entry")
        assert shim.close() == 0
    finally:
        shim.kill()
    (e,) = entries(shim.vault)
    assert e["response"]["answered_by"] == "none" and "cancelled" in e["response"]["error"]


@pytest.mark.parametrize("ending", ["client leaves", "server dies"])
def test_cancelled_call_says_cancelled_whatever_ends_it_before_the_grace(tmp_path: Path, ending: str) -> None:
    # A grace no test outlasts: the entry is written by the ending, never by the cancel's timer, so
    # what it says cannot depend on which comes first (the SDK client test raced the two).
    shim = RawShim(tmp_path, "--cancel-grace", "600")
    try:
        shim.handshake()
        shim.call(1, "hold")
        shim.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        if ending == "client leaves":  # the cancel is in the pipe before the EOF: the shim reads it first
            assert shim.close() == 0
            why = "went away"
        else:
            shim.call(2, "crash")
            assert {shim.recv_json()["id"] for _ in range(2)} == {1, 2}  # the shim's errors for the open requests
            assert shim.close() == 7
            why = "exited (code 7)"
    finally:
        shim.kill()
    e = next(e for e in entries(shim.vault) if e["mcp"]["id"] == 1)
    assert e["response"]["answered_by"] == "none" and e["response"]["status"] is None
    assert e["response"]["error"].startswith("cancelled by the client (notifications/cancelled); "), e["response"]
    assert why in e["response"]["error"]
    assert_intact(shim.vault)


# -- no orphans -----------------------------------------------------------------------------------


class TimerShim:
    """The shim around tests/support/mcp_servers/timer_server.py (a server that will not stop)."""

    def __init__(self, tmp: Path) -> None:
        self.vault = tmp / "vault"
        self.pidfile = tmp / "server.pid"
        server = [PY, "-m", "tests.support.mcp_servers.timer_server", str(self.pidfile)]
        self.proc = subprocess.Popen([*shim_argv(self.vault), "--", *server], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
        _wait(self.pidfile.exists, "the server's pid file")
        self.server_pid, self.grandchild_pid = map(int, self.pidfile.read_text().split())
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
        assert self.proc.stdout is not None
        assert json.loads(self.proc.stdout.readline())["id"] == 0
        self.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "forever"}})

    def send(self, msg: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def cleanup(self) -> None:
        for pid in (self.server_pid, self.grandchild_pid):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.mark.parametrize("how", ["sigterm", "stdin"])
def test_shim_stopped_stops_its_server_and_records_what_is_in_flight(tmp_path: Path, how: str) -> None:
    shim = TimerShim(tmp_path)
    try:
        _wait(lambda: shim.proc.poll() is None and _alive(shim.server_pid), "the server running")
        if how == "sigterm":
            shim.proc.send_signal(signal.SIGTERM)
        else:
            assert shim.proc.stdin is not None
            shim.proc.stdin.close()
        # bounded by WAIT, not timed: the shim must not wait for a server that ignores SIGTERM
        assert shim.proc.wait(timeout=WAIT) == 0
        _wait(lambda: not _alive(shim.server_pid), "the server gone")
        _wait(lambda: not _alive(shim.grandchild_pid), "the server's own child gone (its process group)")
    finally:
        shim.cleanup()
    (e,) = entries(shim.vault)
    assert e["response"]["status"] is None and e["response"]["answered_by"] == "none"
    assert ("signal" if how == "sigterm" else "went away") in e["response"]["error"]
    assert_intact(shim.vault)


def test_server_dies_with_a_killed_shim(tmp_path: Path) -> None:
    shim = TimerShim(tmp_path)
    try:
        shim.proc.kill()  # SIGKILL: the shim can do nothing; the kernel's parent-death signal must
        shim.proc.wait()
        _wait(lambda: not _alive(shim.server_pid), "the server gone after its shim was killed")
    finally:
        shim.cleanup()


# -- the SDK client -------------------------------------------------------------------------------


async def _sampling(ctx, params) -> CreateMessageResult:
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text="42"), model="m")


async def _elicitation(ctx, params) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


ROOT_URI = "file:///work/project"


async def _roots(ctx) -> ListRootsResult:  # a root whose name holds a token: redacted like any body
    return ListRootsResult(roots=[Root(uri=ROOT_URI, name="project " + SECRET)])


async def _everything(c: Client, release: Path) -> None:
    """Prompt, sampling, elicitation, roots, a tool error, and a call cancelled while the server works on it."""
    prompt = await c.get_prompt("greet", {"who": "ann"})
    assert "ann" in prompt.messages[0].content.text
    assert (await c.call_tool("ask_llm", {"question": "q"})).content[0].text == "llm said: 42"
    assert (await c.call_tool("ask_user", {"question": "q"})).content[0].text == "user said ok=True"
    assert (await c.call_tool("roots", {})).content[0].text == ROOT_URI
    assert (await c.call_tool("fail", {"reason": "nope"})).is_error is True
    started = asyncio.Event()

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        started.set()

    call = asyncio.create_task(c.call_tool("wait_for_file", {"path": str(release)}, progress_callback=on_progress))
    await asyncio.wait_for(started.wait(), WAIT)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert (await c.call_tool("echo", {"text": "after"})).content[0].text == "after"


def _check_everything(vault: Path) -> None:
    assert_intact(vault)
    got = entries(vault, asks=True)
    by_method: dict[str, list[dict]] = {}
    for e in got:
        by_method.setdefault(e["request"]["method"], []).append(e)
    (prompt,) = by_method["prompts/get"]
    assert prompt["effect"] == "read" and "ann" in json.dumps(prompt["response"]["body"])
    (sampling,) = by_method["sampling/createMessage"]
    assert sampling["response"]["body"]["result"]["content"]["text"] == "42" and sampling["effect"] == "read"
    (elicitation,) = by_method["elicitation/create"]
    assert elicitation["response"]["body"]["result"]["content"] == {"ok": True}
    (roots,) = by_method["roots/list"]  # the server asked the client for its roots: the answer is recorded
    assert roots["effect"] == "read" and roots["request"]["effect_basis"] == "rule"
    assert roots["mcp"]["method"] == "roots/list" and roots["response"]["answered_by"] == "upstream"
    (root,) = roots["response"]["body"]["result"]["roots"]
    assert root["uri"] == ROOT_URI and root["name"].startswith("project ")
    assert SECRET not in json.dumps(got)  # the token in the root's URI is redacted like any body
    calls = {e["mcp"]["params"]["name"]: e for e in by_method["tools/call"]}
    assert calls["fail"]["response"]["error"] == TOOL_ERROR
    # cancelled: no answer (answered_by none), or the server's own answer to the cancel (an SDK server
    # over streamable HTTP answers -32800), and either way the entry says the client cancelled it
    cancelled = calls["wait_for_file"]["response"]
    assert cancelled["error"].startswith("cancelled by the client"), cancelled
    assert cancelled["answered_by"] == "none" or cancelled["body"]["error"]["code"] == -32800, cancelled
    assert calls["echo"]["response"]["answered_by"] == "upstream"


def test_sdk_client_over_stdio(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    argv = shim_argv(vault, "--cancel-grace", "0.2")
    params = StdioServerParameters(command=argv[0], args=[*argv[1:], "--", *NOTES_SERVER], cwd=str(REPO))

    async def run() -> None:
        async with Client(params, mode="legacy", sampling_callback=_sampling, elicitation_callback=_elicitation,
                          list_roots_callback=_roots,
                          read_timeout_seconds=WAIT) as c:
            await _everything(c, tmp_path / "never")

    asyncio.run(run())
    _check_everything(vault)


class ListenShim:
    def __init__(self, vault: Path, upstream: str, *options: str) -> None:
        self.port = free_port()
        argv = [*shim_argv(vault, *options), "--listen", f"127.0.0.1:{self.port}", "--upstream", upstream]
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _upstream(kind: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([PY, "-m", "tests.support.mcp_servers.notes_server", kind, str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/{'mcp' if kind == 'http' else 'sse'}"
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT)


@pytest.fixture(scope="module")
def upstream_http() -> Iterator[str]:
    yield from _upstream("http")


@pytest.fixture(scope="module")
def upstream_sse() -> Iterator[str]:
    yield from _upstream("sse")


def test_sdk_client_over_streamable_http(tmp_path: Path, upstream_http: str) -> None:
    vault = tmp_path / "vault"
    shim = ListenShim(vault, upstream_http, "--cancel-grace", "0.2")
    try:
        async def run() -> None:
            http = httpx2.AsyncClient(timeout=httpx2.Timeout(WAIT, read=WAIT))
            transport = streamable_http_client(shim.url("/mcp"), http_client=http)
            async with Client(transport, mode="legacy", sampling_callback=_sampling, list_roots_callback=_roots,
                              elicitation_callback=_elicitation, read_timeout_seconds=WAIT) as c:
                await _everything(c, tmp_path / "never")

        asyncio.run(run())
        _wait(lambda: any(e["request"]["method"] == "tools/call" and e["mcp"]["params"]["name"] == "wait_for_file"
                          for e in entries(vault)), "the cancelled call's entry")
    finally:
        shim.stop()
    _check_everything(vault)


def test_sdk_client_over_legacy_sse(tmp_path: Path, upstream_sse: str) -> None:
    vault = tmp_path / "vault"
    shim = ListenShim(vault, upstream_sse, "--cancel-grace", "0.2")
    try:
        async def run() -> None:
            transport = sse_client(shim.url("/sse"), timeout=WAIT)
            async with Client(transport, mode="legacy", sampling_callback=_sampling, list_roots_callback=_roots,
                              elicitation_callback=_elicitation, read_timeout_seconds=WAIT) as c:
                await _everything(c, tmp_path / "never")
                # the cancelled call's entry is written while the session is still open
                _wait(lambda: any(e["request"]["method"] == "tools/call"
                                  and e["mcp"]["params"]["name"] == "wait_for_file" for e in entries(vault)),
                      "the cancelled call's entry")

        asyncio.run(run())
    finally:
        shim.stop()
    _check_everything(vault)
