// The browser side of muster's web-inbox test (orchestrator/tests/suite/serve_cli.rs):
// Debian's Chromium, driven by playwright-core, opens the URL `muster serve` printed, reads
// the pending plan and its diff to the previous revision, edits the plan in the page and
// approves it. Screenshots go to SCREENSHOTS for a person to look at.
// Arguments: URL (with its token), the request page's path, the text to add to the plan.
import { chromium } from "playwright-core";

const [url, requestPath, addition] = process.argv.slice(2);
const shots = process.env.SCREENSHOTS;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const page = await browser.newPage({ viewport: { width: 1200, height: 1600 } });

// The page reloads itself when the store changes (the run goes on committing while the test
// navigates), and that reload aborts a navigation begun at the same moment: go again then.
async function open(target) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await page.goto(target);
    } catch (error) {
      if (attempt >= 5 || !String(error.message).includes("ERR_ABORTED")) throw error;
    }
  }
}
try {
  const blocked = [];
  page.on("console", (message) => {
    if (message.type() === "error") blocked.push(message.text());
  });
  await page.goto(url);
  if (new URL(page.url()).search !== "") throw new Error(`the token stayed in the URL: ${page.url()}`);
  await page.screenshot({ path: `${shots}/runs.png`, fullPage: true });
  const origin = new URL(url).origin;
  await open(origin + requestPath);
  await page.locator("#plan h2", { hasText: "Steps" }).waitFor();
  await page.locator("#diff .removed").first().waitFor();
  await page.screenshot({ path: `${shots}/pending-plan.png`, fullPage: true });
  const editor = page.locator("#approve-edited textarea[name=plan]");
  await editor.fill((await editor.inputValue()) + addition);
  await page.locator("#approve-edited select[name=mode]").selectOption("acceptEdits");
  await page.locator("#approve-edited button[type=submit]").click();
  await page.locator("#decision h2", { hasText: "Approved by human" }).waitFor();
  await page.screenshot({ path: `${shots}/approved.png`, fullPage: true });
  if (blocked.length > 0) throw new Error(`the page logged errors: ${blocked.join(" | ")}`);
  console.log("approved in the browser");
} catch (error) {
  await page.screenshot({ path: `${shots}/failure.png`, fullPage: true }).catch(() => {});
  console.error(`at ${page.url()}: ${await page.content().catch(() => "")}`);
  throw error;
} finally {
  await browser.close();
}
