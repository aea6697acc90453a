// One call from a Node client as its README shows it ("plain"), or with the setting docs/clients.md gives
// ("configured"): node clients.mjs CLIENT MODE URL. Run from a folder whose node_modules holds undici,
// @octokit/rest and openai (tests/e2e/test_clients.py copies it there). Prints one JSON line.
import { EnvHttpProxyAgent, fetch as undiciFetch, setGlobalDispatcher } from "undici";
import { Octokit } from "@octokit/rest";
import OpenAI from "openai";

const [client, mode, url] = process.argv.slice(2);
const configured = mode === "configured";

async function call() {
  if (client === "fetch") {
    if (configured) setGlobalDispatcher(new EnvHttpProxyAgent());
    const r = await fetch(url);
    return r.status;
  }
  if (client === "octokit") {
    const options = { auth: "ghp_clientstest0000000000000000000000000", baseUrl: url };
    if (configured) {
      const dispatcher = new EnvHttpProxyAgent();
      options.request = { fetch: (u, init) => undiciFetch(u, { ...init, dispatcher }) };
    }
    const r = await new Octokit(options).request("GET /user");
    return r.status;
  }
  if (client === "openai") {
    const options = { apiKey: "sk-clientstest-0", baseURL: url, maxRetries: 0 };
    if (configured) options.fetchOptions = { dispatcher: new EnvHttpProxyAgent() };
    const page = await new OpenAI(options).models.list();
    return page.data ? 200 : 0;
  }
  throw new Error(`unknown client ${client}`);
}

try {
  console.log(JSON.stringify({ ok: true, status: await call() }));
} catch (err) {
  console.log(JSON.stringify({ ok: false, status: err.status ?? null, error: String(err).slice(0, 300) }));
}
