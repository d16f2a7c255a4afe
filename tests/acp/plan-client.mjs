// An ACP client written with the official TypeScript SDK's stable entry point
// (client().onRequest(…).onNotification(…).connect(…)), for muster's editor tests:
//   node plan-client.mjs MUSTER_BINARY PROJECT_DIR PROMPT
// It starts `MUSTER_BINARY acp` in PROJECT_DIR, opens a session, sends PROMPT, and answers
// each session/request_permission in turn: the first is rejected with feedback (in the
// answer's `_meta` key `muster/feedback`), every later one approved into acceptEdits. It
// prints one JSON object: the updates, the permission requests and the stop reason.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { client, ndJsonStream } from "@agentclientprotocol/sdk";

const [muster, cwd, prompt] = process.argv.slice(2);
const agent = spawn(muster, ["acp"], { cwd, stdio: ["pipe", "pipe", "inherit"] });
const stream = ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));

const updates = [];
const requests = [];
const connection = client()
  .onRequest("session/request_permission", ({ params }) => {
    requests.push(params);
    if (requests.length === 1) {
      return {
        outcome: { outcome: "selected", optionId: "reject" },
        _meta: { "muster/feedback": "Say how it is tested." },
      };
    }
    return { outcome: { outcome: "selected", optionId: "approve:acceptEdits" } };
  })
  .onNotification("session/update", ({ params }) => {
    updates.push(params.update);
  })
  .connect(stream);

const { agent: peer } = connection;
await peer.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
const { sessionId } = await peer.request("session/new", { cwd, mcpServers: [] });
const { stopReason } = await peer.request("session/prompt", {
  sessionId,
  prompt: [{ type: "text", text: prompt }],
});
connection.close();
agent.stdin.end();
await new Promise((resolve) => agent.on("exit", resolve));
process.stdout.write(JSON.stringify({ sessionId, stopReason, updates, requests }) + "\n");
