// The browser side of muster's cockpit test (orchestrator/tests/suite/serve_cli.rs): Debian's
// Chromium, driven by playwright-core, watches a live team run on its run page while the test
// holds and releases the fake model server's gates. It prints `STEP name` when it has seen a
// point of the run and waits for a `GO name` line on stdin before going on, so the test never
// races the run. Screenshots go to SCREENSHOTS.
// Arguments: URL (with its token), the run id.
import { chromium } from "playwright-core";
import readline from "node:readline";

const [url, runId] = process.argv.slice(2);
const shots = process.env.SCREENSHOTS;
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

// Says `STEP name`, waits for `GO name [word]` and gives back the word (a run id, or "").
async function step(name) {
  console.log(`STEP ${name}`);
  const { value, done } = await lines.next();
  const [go, said, word] = (value || "").trim().split(" ");
  if (done || go !== "GO" || said !== name) throw new Error(`expected GO ${name}, got ${value}`);
  return word || "";
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 1200 } });
// Counts the live streams each document opened (an init script runs outside the page's CSP):
// the test waits for this before the reply streams, so its pieces come as deltas.
await page.addInitScript(() => {
  const Original = window.EventSource;
  window.EventSource = class extends Original {
    constructor(url, options) {
      super(url, options);
      this.addEventListener("open", () => { window.__streamsOpen = (window.__streamsOpen || 0) + 1; });
    }
  };
});
const errors = [];
page.on("console", (message) => {
  if (message.type() === "error") errors.push(message.text());
});
page.on("pageerror", (error) => errors.push(String(error)));

// The state cell of an agent's row, waited on until it says `state` (the row is swapped in
// place by the live stream: no reload).
async function agentState(agent, state) {
  await page.locator(`[id="agent-${agent}"] .agent-state`, { hasText: state }).waitFor();
}

try {
  await page.goto(url);
  const origin = new URL(url).origin;
  const runPage = `${origin}/runs/${runId}`;
  await page.goto(runPage);
  await agentState("alice", "thinking");
  await page.screenshot({ path: `${shots}/run-thinking.png`, fullPage: true });
  // The page is not reloaded from here on: a marker set now must survive every update.
  await page.evaluate(() => { window.__sameDocument = true; });
  await step("alice-thinking");

  await agentState("alice", "waiting on a decision");
  await agentState("bob", "idle");
  if (!(await page.evaluate(() => window.__sameDocument === true))) {
    throw new Error("the run page reloaded instead of taking the parts it was sent");
  }
  await page.screenshot({ path: `${shots}/run-waiting.png`, fullPage: true });
  await page.locator(`[id="agent-bob"] form.stop-agent button`).click();
  await page.waitForURL(runPage);
  await agentState("bob", "stopped");
  await page.screenshot({ path: `${shots}/run-bob-stopped.png`, fullPage: true });

  await page.goto(`${origin}/runs/${runId}/requests/plan-alice-1`);
  const plan = await page.locator("#plan").innerHTML();
  if (!/hello\.txt<br>\s*README\.md/.test(plan)) throw new Error(`the Files lines were joined: ${plan}`);
  const own = await page.locator("#approve select[name=mode] option").first().textContent();
  if (!own.includes("restore its own: default")) throw new Error(`the restore choice says ${own}`);
  await page.screenshot({ path: `${shots}/request.png`, fullPage: true });
  await page.locator("#approve select[name=mode]").selectOption("acceptEdits");
  await page.locator("#approve button[type=submit]").click();
  await page.locator("#decision h2", { hasText: "Approved by human" }).waitFor();
  await page.locator("#next", { hasText: "was woken" }).waitFor();

  // Alice's last reply streams: its first piece shows in her row before it is committed.
  await page.goto(runPage);
  await page.waitForFunction(() => window.__streamsOpen >= 1);
  await step("stream-ready");
  await page.waitForFunction(() => {
    const piece = document.querySelector('[id="agent-alice"] .doing .streaming');
    return piece && piece.textContent.startsWith("Wrote hello.txt,");
  });
  const piece = await page.locator('[id="agent-alice"] .doing .streaming').textContent();
  if (piece.endsWith("back.")) throw new Error(`the whole reply showed before its end: ${piece}`);
  await page.screenshot({ path: `${shots}/run-streaming.png`, fullPage: true });
  // A page opened mid-stream shows what streamed before it (serve keeps it), as it is.
  await page.goto(runPage);
  // Read at once: the served HTML holds it, no delta is coming (the reply is held mid-way).
  const late = await page.evaluate(() =>
    document.querySelector('[id="agent-alice"] .doing .streaming')?.textContent);
  if (late !== piece) throw new Error(`a page opened mid-stream shows ${late}, not ${piece}`);
  await step("alice-streaming");
  await page.locator("#reports .checklist li.done").first().waitFor();
  if (await page.locator('[id="agent-alice"] .streaming').count() !== 0) {
    throw new Error("the streamed piece stayed after the committed reply");
  }
  await page.locator("#reports .checklist li.missing").first().waitFor();
  const reports = await page.locator("#reports").textContent();
  if (reports.includes("{\"") || reports.includes("\"steps\"")) throw new Error(`a report shows JSON: ${reports}`);
  await page.locator("#timeline svg rect.decision").first().waitFor();
  await page.screenshot({ path: `${shots}/run-reported.png`, fullPage: true });

  await page.goto(`${origin}/runs/${runId}/agents/alice`);
  await page.locator("#transcript details").first().waitFor();
  const transcript = await page.locator("#transcript").textContent();
  if (!transcript.includes("<script>document.title='owned'")) throw new Error("the script text is not shown as text");
  await page.locator("#transcript details summary", { hasText: "Read" }).first().click();
  const owned = await page.evaluate(() => document.title.includes("owned") || window.__owned !== undefined);
  if (owned) throw new Error("a tool result ran as script");
  await page.screenshot({ path: `${shots}/agent.png`, fullPage: true });

  // A second run, killed while its lead waited on the model: no process holds it. A person's
  // stop is stored for its next resume, which ends at once; the page (not reloaded) says so.
  const idle = await step("idle-run");
  await page.goto(`${origin}/runs/${idle}`);
  await page.locator("#stop-run button", { hasText: "Stop at resume" }).click();
  await page.waitForURL(`${origin}/runs/${idle}`);
  await page.locator("#run-summary .stopped-by", { hasText: "while no process ran it: the next" }).waitFor();
  if (await page.locator("#stop-run").count() !== 0) throw new Error("the stop form stayed after the stop");
  await page.evaluate(() => { window.__sameDocument = true; });
  await page.screenshot({ path: `${shots}/run-stop-at-resume.png`, fullPage: true });
  await step("resume");
  await page.locator("#run-summary .stopped-by", { hasText: "honoured it and ended at once" }).waitFor();
  await page.locator("#run-status", { hasText: "interrupted" }).waitFor();
  if (!(await page.evaluate(() => window.__sameDocument === true))) {
    throw new Error("the run page reloaded instead of taking the parts it was sent");
  }
  await page.screenshot({ path: `${shots}/run-stop-honoured.png`, fullPage: true });
  if (errors.length > 0) throw new Error(`the page logged errors: ${errors.join(" | ")}`);
  console.log("STEP done");
} catch (error) {
  await page.screenshot({ path: `${shots}/cockpit-failure.png`, fullPage: true }).catch(() => {});
  console.error(`at ${page.url()}: ${await page.content().catch(() => "")}`);
  throw error;
} finally {
  await browser.close();
  process.stdin.destroy();
}
