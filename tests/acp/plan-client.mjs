// An ACP client written with the official TypeScript SDK's entry point
// (client().onRequest(…).onNotification(…).connect(…)), for muster's editor tests:
//   node plan-client.mjs MUSTER_BINARY PROJECT_DIR PROMPT
// It starts `MUSTER_BINARY acp` in PROJECT_DIR, opens a session, sends PROMPT, and answers
// each session/request_permission in turn: the first is rejected with feedback (in the
// answer's `_meta` key `muster/feedback`), every later one approved (a plan into acceptEdits).
// It prints one JSON object: the session's updates, the permission requests, the stop reason,
// and `threads`: the updates each other session id (a subagent thread) was sent.
// Knobs (environment):
//   ACP_ENTRY=unstable  import the SDK's `/unstable` entry point instead of the stable one, and
//                       advertise subagent threads (`clientCapabilities.subagents`).
//   ACP_LOAD=SESSION    `session/load` SESSION (replayed updates come first) instead of
//                       `session/new`, then prompt it.
//   ACP_HOLD=1          hold each permission request until a line arrives on stdin; the
//                       client says `acp-client: holding TOOL_CALL_ID` on stderr first, and
//                       `acp-client: message TEXT` (JSON) for each message chunk it is sent.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";

const unstable = process.env.ACP_ENTRY === "unstable";
const { client, ndJsonStream } = await import(
  unstable ? "@agentclientprotocol/sdk/unstable" : "@agentclientprotocol/sdk"
);
const releases = process.env.ACP_HOLD
  ? createInterface({ input: process.stdin })[Symbol.asyncIterator]()
  : null;

const [muster, cwd, prompt] = process.argv.slice(2);
const agent = spawn(muster, ["acp"], { cwd, stdio: ["pipe", "pipe", "inherit"] });
// An agent killed mid-prompt closes its stdin under us: that is the test's to see, not a crash.
agent.stdin.on("error", () => {});
const exited = new Promise((resolve) => agent.on("exit", resolve));
const stream = ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));

const notifications = [];
const requests = [];
const approval = (options) =>
  (options.find((o) => o.optionId === "approve:acceptEdits") ??
    options.find((o) => o.kind === "allow_once")).optionId;
const connection = client()
  .onRequest("session/request_permission", async ({ params }) => {
    requests.push(params);
    const first = requests.length === 1;
    if (releases) {
      process.stderr.write(`acp-client: holding ${params.toolCall.toolCallId}\n`);
      await releases.next();
    }
    if (first) {
      return {
        outcome: { outcome: "selected", optionId: "reject" },
        _meta: { "muster/feedback": "Say how it is tested." },
      };
    }
    return { outcome: { outcome: "selected", optionId: approval(params.options) } };
  })
  .onNotification("session/update", ({ params }) => {
    notifications.push(params);
    if (releases && params.update.sessionUpdate === "agent_message_chunk") {
      process.stderr.write(`acp-client: message ${JSON.stringify(params.update.content.text)}\n`);
    }
  })
  .connect(stream);

const { agent: peer } = connection;
await peer.request("initialize", {
  protocolVersion: 1,
  clientCapabilities: unstable ? { subagents: {} } : {},
});
let sessionId = process.env.ACP_LOAD;
if (sessionId) {
  await peer.request("session/load", { sessionId, cwd, mcpServers: [] });
} else {
  ({ sessionId } = await peer.request("session/new", { cwd, mcpServers: [] }));
}
// A prompt the agent never answers (it was killed) is printed as `promptError`.
let stopReason = null;
let promptError = null;
try {
  ({ stopReason } = await peer.request("session/prompt", {
    sessionId,
    prompt: [{ type: "text", text: prompt }],
  }));
} catch (error) {
  promptError = String(error?.message ?? error);
}
connection.close();
agent.stdin.end();
await exited;
const updates = notifications.filter((n) => n.sessionId === sessionId).map((n) => n.update);
const threads = {};
for (const n of notifications.filter((n) => n.sessionId !== sessionId)) {
  (threads[n.sessionId] ??= []).push(n.update);
}
process.stdout.write(
  JSON.stringify({ sessionId, stopReason, promptError, updates, requests, threads }) + "\n",
);
process.exit(0);
