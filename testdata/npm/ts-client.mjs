// A test agent on the official MCP TypeScript SDK client (pinned in
// package.json): it connects over Streamable HTTP with a bearer API key,
// lists the tools (so the client caches and enforces their outputSchema, as
// every SDK-based agent does), then runs each call in order and prints one
// JSON line per call:
//
//   {"name": N, "result": CallToolResult}          the client accepted the result
//   {"name": N, "thrown": {"code": C, "message": M}} the client threw
//
// Usage: node ts-client.mjs URL KEY CALLS_JSON
// where CALLS_JSON is [{"name": "...", "arguments": {...}}, ...].
// Exit status: 0 when every call was attempted, 2 on a usage or connection
// failure (the reason on stderr).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key, callsJSON] = process.argv.slice(2);
if (!url || !key || !callsJSON) {
  console.error("usage: node ts-client.mjs URL KEY CALLS_JSON");
  process.exit(2);
}

let calls;
try {
  calls = JSON.parse(callsJSON);
} catch (e) {
  console.error(`CALLS_JSON: ${e.message}`);
  process.exit(2);
}

const client = new Client({ name: "toolgate-ts-test-agent", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
try {
  await client.connect(transport);
  await client.listTools();
} catch (e) {
  console.error(`connect/list: ${e.message}`);
  process.exit(2);
}

for (const c of calls) {
  let line;
  try {
    const result = await client.callTool({ name: c.name, arguments: c.arguments ?? {} });
    line = { name: c.name, result };
  } catch (e) {
    line = { name: c.name, thrown: { code: e.code ?? null, message: String(e.message) } };
  }
  process.stdout.write(JSON.stringify(line) + "\n");
}
await client.close();
