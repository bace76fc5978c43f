// Drives the log explorer page in headless Chromium (Debian's, never a downloaded one) and
// reports what a person would see, one JSON object per line on stdout, for
// tests/serve_browser.rs to check against SQL. Screenshots go to $ARTEFACTS.
//
// Environment: BASE_URL (the server), FROM and TO (a range of loaded lines), ARTEFACTS (a
// directory), LIVE_LINES (how many lines the test inserts while the page is live), WORKER_LINES
// (how many lines workers then ingest).
import { WAIT, launch, report } from "./chromium.mjs";

const { BASE_URL, FROM, TO, ARTEFACTS } = process.env;
const LIVE_LINES = Number(process.env.LIVE_LINES);
const WORKER_LINES = Number(process.env.WORKER_LINES);

const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("pageerror", (e) => report("page-error", { message: String(e) }));

  // Waits for the view started after `before` (a value of #lines' data-ready) to be drawn.
  const loadedAfter = (before) =>
    page.waitForFunction(
      (b) => {
        const lines = document.querySelector("#lines").dataset.ready;
        const bars = document.querySelector("#histogram").dataset.ready;
        return lines && lines !== b && bars === lines;
      },
      before,
      WAIT,
    );
  const ready = () => page.$eval("#lines", (t) => t.dataset.ready || "");
  const total = () => page.$eval("#total", (t) => Number(t.dataset.total));
  const levels = () => page.$$eval("tr.line td.level", (cells) => cells.map((c) => c.textContent));
  const shownIds = () => page.$$eval("tr.line", (rows) => rows.map((r) => r.dataset.id));
  const view = () => Object.fromEntries(new URL(page.url()).searchParams);

  // A range.
  await page.goto(`${BASE_URL}/?from=${encodeURIComponent(FROM)}&to=${encodeURIComponent(TO)}`);
  await loadedAfter("");
  report("loaded", { total: await total(), lines: (await levels()).length, view: view() });
  await page.screenshot({ path: `${ARTEFACTS}/range.png` });

  // A filter: only errors.
  let before = await ready();
  await page.fill("#filter", "level = 'error'");
  await page.press("#filter", "Enter");
  await loadedAfter(before);
  report("filtered", { total: await total(), levels: await levels(), view: view() });
  await page.screenshot({ path: `${ARTEFACTS}/errors.png` });

  // A broken filter: the error is shown where it is typed.
  await page.fill("#filter", "level == 'error'");
  await page.press("#filter", "Enter");
  await page.waitForSelector("#filter-error:not([hidden])", WAIT);
  report("filter-error", {
    text: await page.textContent("#filter-error"),
    invalid: await page.getAttribute("#filter", "aria-invalid"),
  });
  await page.screenshot({ path: `${ARTEFACTS}/filter-error.png` });

  // A search: plain text in the box finds the lines whose message holds it, in any case.
  before = await ready();
  await page.fill("#filter", "ORDERS/123");
  await page.press("#filter", "Enter");
  await loadedAfter(before);
  report("searched", {
    total: await total(),
    ids: await shownIds(),
    messages: await page.$$eval("tr.line td.message", (cells) => cells.map((c) => c.textContent)),
    view: view(),
  });
  await page.screenshot({ path: `${ARTEFACTS}/searched.png` });
  before = await ready();
  await page.fill("#filter", "level = 'error'");
  await page.press("#filter", "Enter");
  await loadedAfter(before);

  // A line opened to its whole document.
  const first = await page.$("tr.line");
  const id = await first.getAttribute("data-id");
  await first.click();
  await page.waitForSelector("tr.detail pre", WAIT);
  report("opened", {
    id,
    document: JSON.parse(await page.textContent("tr.detail pre")),
    view: view(),
  });
  await page.screenshot({ path: `${ARTEFACTS}/opened.png` });

  // Zoom: drag across the middle of the histogram.
  const box = await page.locator("#histogram").boundingBox();
  before = await ready();
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.45, box.y + box.height / 2, { steps: 5 });
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  await loadedAfter(before);
  const zoomed = view();
  report("zoomed", { total: await total(), levels: await levels(), view: zoomed });
  await page.screenshot({ path: `${ARTEFACTS}/zoomed.png` });

  // The URL is the view: opened elsewhere, it shows the same.
  const shared = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await shared.goto(page.url());
  await shared.waitForFunction(
    () => document.querySelector("#lines").dataset.ready && document.querySelector("#total").dataset.total,
    null,
    WAIT,
  );
  report("shared", {
    total: Number(await shared.$eval("#total", (t) => t.dataset.total)),
    filter: await shared.inputValue("#filter"),
    opened: await shared.$$eval("tr.detail", (rows) => rows.length),
  });
  await shared.close();

  // Live: lines inserted now appear, each once, whatever order their batches commit in.
  await page.goto(`${BASE_URL}/?from=now-15m&to=now&live=1&where=${encodeURIComponent("service = 'live'")}`);
  await loadedAfter("");
  report("live-ready", {});
  await page.waitForFunction((n) => document.querySelectorAll("tr.line").length >= n, LIVE_LINES / 2, WAIT);
  report("live-half", { ids: await shownIds() });
  await page.waitForFunction((n) => document.querySelectorAll("tr.line").length >= n, LIVE_LINES, WAIT);
  // Two more refreshes: nothing is shown twice.
  const refreshes = await page.$eval("#lines", (t) => Number(t.dataset.live || 0));
  await page.waitForFunction((n) => Number(document.querySelector("#lines").dataset.live || 0) >= n + 2, refreshes, WAIT);
  report("live", { ids: await shownIds(), total: await total() });
  // Then workers ingest: their lines appear as their batches commit.
  report("worker-ready", {});
  await page.waitForFunction((n) => document.querySelectorAll("tr.line").length >= n, LIVE_LINES + WORKER_LINES, WAIT);
  const afterWorkers = await page.$eval("#lines", (t) => Number(t.dataset.live || 0));
  await page.waitForFunction((n) => Number(document.querySelector("#lines").dataset.live || 0) >= n + 2, afterWorkers, WAIT);
  report("worker", { ids: await shownIds(), total: await total() });
  await page.screenshot({ path: `${ARTEFACTS}/live.png` });
  report("done", {});
} finally {
  await browser.close();
}
