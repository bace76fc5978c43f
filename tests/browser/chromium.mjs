// What the browser scripts share: Debian's headless Chromium (never a downloaded one), and
// reports to the Rust test, one JSON object per line on stdout.
import { chromium } from "playwright-core";

// How long a script waits for what the page should show.
export const WAIT = { timeout: 30_000 };

export function report(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + "\n");
}

export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu"],
  });
}
