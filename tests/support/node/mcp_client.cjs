// The Node MCP SDK client through the shim (tests/e2e/test_mcp_node_sdk.py): a prompt, sampling,
// elicitation, and a call it cancels. NODE_MCP_DIR holds the npm packages (installed outside the
// repository); SHIM_ARGV is the shim's command line (JSON) ending with the server after `--`.
const path = require("path");
const { createRequire } = require("module");
const req = createRequire(path.join(process.env.NODE_MCP_DIR, "package.json"));
const { Client } = req("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = req("@modelcontextprotocol/sdk/client/stdio.js");
const { CreateMessageRequestSchema, ElicitRequestSchema } = req("@modelcontextprotocol/sdk/types.js");

async function main() {
  const argv = JSON.parse(process.env.SHIM_ARGV);
  const transport = new StdioClientTransport({ command: argv[0], args: argv.slice(1), stderr: "inherit" });
  const client = new Client({ name: "node-test", version: "1" }, { capabilities: { sampling: {}, elicitation: {} } });
  client.setRequestHandler(CreateMessageRequestSchema, async () => ({
    role: "assistant", model: "test-model", content: { type: "text", text: "node says 42" },
  }));
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: { name: "Ann" } }));
  await client.connect(transport);
  const out = {};
  const prompt = await client.getPrompt({ name: "simple-prompt" });
  out.prompt = prompt.messages.length;
  out.sampling = JSON.stringify((await client.callTool({ name: "trigger-sampling-request", arguments: { prompt: "q" } })).content);
  out.elicitation = JSON.stringify((await client.callTool({ name: "trigger-elicitation-request", arguments: {} })).content);
  const abort = new AbortController();
  let started;
  const progressed = new Promise((resolve) => { started = resolve; });
  const call = client.callTool({ name: "trigger-long-running-operation", arguments: { duration: 60, steps: 60 } },
    undefined, { signal: abort.signal, onprogress: () => started() });
  await progressed;
  abort.abort("the test cancels it");
  out.cancelled = await call.then(() => false, () => true);
  // a task-based call (2025-11-25): created, polled, its result fetched with tasks/result (the client
  // learns from tools/list that the tool runs as a task)
  await client.listTools();
  const kinds = [];
  for await (const message of client.experimental.tasks.callToolStream(
    { name: "simulate-research-query", arguments: { topic: "owls" } })) {
    kinds.push(message.type);
    if (message.type === "result") out.task_result = JSON.stringify(message.result.content);
    if (message.type === "taskCreated") out.task_id = message.task.taskId;
  }
  out.task_kinds = kinds;
  await client.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err) => { console.error(err); process.exit(1); });
