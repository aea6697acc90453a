"""The official Anthropic, OpenAI and Google Gen AI Python SDKs through `broker run --prompts refs`: their requests,
streamed and not, are recorded as model entries, and their parsers accept what reaches them (the
stream passes through unchanged, and the fake model APIs answer in the shapes the SDKs expect)."""

from __future__ import annotations

import json
import ssl

import anthropic
import httpx
import httpx2
import openai
import pytest

from tests.support.broker_harness import BrokerProcess
from tests.support.upstreams import Upstream

pytestmark = pytest.mark.e2e
TASK = "sdk task text that must not be in the vault"
TOOL = {"name": "gmail_list_messages", "description": "List mail.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with Upstream() as up, BrokerProcess(tmp_path_factory.mktemp("sdk"), up, "--prompts", "refs") as b:
        yield b


def _http(b: BrokerProcess, session: str, client=httpx.Client):
    """The SDK's HTTP client, through the broker (the Anthropic SDK takes an httpx2 client)."""
    return client(proxy=b.proxy_url(session, "sdk-agent"), verify=ssl.create_default_context(cafile=b.ca))


def test_anthropic_sdk_streamed_and_not(broker):
    with _http(broker, "sdk-anthropic", httpx2.Client) as http:
        client = anthropic.Anthropic(api_key="sk-ant-api03-sdk-key-never-recorded", http_client=http, max_retries=0)
        with client.messages.stream(model="claude-sonnet-4-5", max_tokens=256, tools=[TOOL],
                                    messages=[{"role": "user", "content": TASK}]) as stream:
            texts = list(stream.text_stream)
            streamed = stream.get_final_message()
        plain = client.messages.create(model="claude-sonnet-4-5", max_tokens=256, tools=[TOOL],
                                       messages=[{"role": "user", "content": TASK}])
    assert "".join(texts) == "I'll look at the unread mail first."
    for message in (streamed, plain):
        (use,) = [b for b in message.content if b.type == "tool_use"]
        assert (use.name, use.input) == ("gmail_list_messages", {"q": "is:unread", "maxResults": 3})
    entries = broker.entries("sdk-anthropic", 2)
    assert [("stream" in e["response"], e["request"]["prompt_capture"]) for e in entries] == [
        (True, "refs"), (False, "refs")]
    for e in entries:
        assert e["response"]["body"]["content"][1]["input"] == {"q": "is:unread", "maxResults": 3}
    dumped = json.dumps(entries)
    assert TASK not in dumped and "sdk-key-never-recorded" not in dumped


def test_openai_sdk_chat_and_responses_streamed(broker):
    with _http(broker, "sdk-openai") as http:
        client = openai.OpenAI(api_key="sk-proj-sdk-key-never-recorded", http_client=http, max_retries=0)
        tools = [{"type": "function", "function": {"name": TOOL["name"], "description": TOOL["description"],
                                                   "parameters": TOOL["input_schema"]}}]
        calls: dict[int, dict] = {}
        for chunk in client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": TASK}],
                                                    tools=tools, stream=True):
            for tc in chunk.choices[0].delta.tool_calls or ():
                slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
        final = None
        with client.responses.stream(model="gpt-4.1", input=TASK, tools=[
                {"type": "function", "name": TOOL["name"], "parameters": TOOL["input_schema"], "strict": False}]) as s:
            for _event in s:
                pass
            final = s.get_final_response()
    assert json.loads(calls[0]["arguments"]) == {"q": "is:unread", "maxResults": 3}
    (fc,) = [o for o in final.output if o.type == "function_call"]
    assert fc.name == "gmail_list_messages" and json.loads(fc.arguments)["q"] == "is:unread"
    entries = broker.entries("sdk-openai", 2)
    assert [e["response"]["stream"]["format"] for e in entries] == ["sse", "sse"]
    assert entries[0]["response"]["body"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == \
        "gmail_list_messages"
    assert entries[1]["response"]["body"]["output"][1]["name"] == "gmail_list_messages"
    dumped = json.dumps(entries)
    assert TASK not in dumped and "sdk-key-never-recorded" not in dumped


def test_google_genai_sdk_generate_and_stream(broker):
    from google import genai
    from google.genai import types

    with _http(broker, "sdk-gemini") as http:
        client = genai.Client(api_key="AIzaSySdkKeyNeverRecorded0123456789",
                              http_options=types.HttpOptions(httpx_client=http))
        tool = types.Tool(function_declarations=[types.FunctionDeclaration(
            name=TOOL["name"], description=TOOL["description"], parameters_json_schema=TOOL["input_schema"])])
        config = types.GenerateContentConfig(tools=[tool], automatic_function_calling={"disable": True})
        plain = client.models.generate_content(model="gemini-2.5-flash", contents=TASK, config=config)
        chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents=TASK, config=config))
    assert plain.function_calls[0].name == "gmail_list_messages"
    assert [c.name for chunk in chunks for c in chunk.function_calls or ()] == ["gmail_list_messages"]
    entries = broker.entries("sdk-gemini", 2)
    assert [("stream" in e["response"]) for e in entries] == [False, True]
    assert all(e["connector"] == "gemini" and e["request"]["prompt_capture"] == "refs" for e in entries)
    dumped = json.dumps(entries)
    assert TASK not in dumped and "SdkKeyNeverRecorded" not in dumped
