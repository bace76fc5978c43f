// Drives the log explorer's opened line, "Older lines" and shared URLs in headless Chromium,
// reporting what the page shows, one JSON object per line on stdout, for
// tests/serve_browser.rs to check against SQL.
//
// Environment: BASE_URL (the server), BIG_FROM and BIG_TO (a range holding one line whose
// payload has integers past 2^53), RANGE (the query string of a range holding every line, in
// the CLI's relative form), CLICKS (how many times to page back).
import { WAIT, launch, report } from "./chromium.mjs";

const { BASE_URL, BIG_FROM, BIG_TO, RANGE } = process.env;
const CLICKS = Number(process.env.CLICKS);

const browser = await launch();

// A new tab at `url`, once its view is drawn.
async function open(url) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("pageerror", (e) => report("page-error", { message: String(e) }));
  await page.goto(url);
  await page.waitForFunction(
    () => {
      const lines = document.querySelector("#lines").dataset.ready;
      return lines && document.querySelector("#histogram").dataset.ready === lines;
    },
    null,
    WAIT,
  );
  return page;
}

// What a page shows: its lines' IDs in order, the one opened, the URL's view, the status.
async function shows(page) {
  return {
    ids: await page.$$eval("tr.line", (rows) => rows.map((r) => r.dataset.id)),
    opened: await page.$$eval("tr.detail", (rows) => rows.map((r) => r.previousElementSibling.dataset.id)),
    view: Object.fromEntries(new URL(page.url()).searchParams),
    status: await page.textContent("#status"),
    more: await page.isVisible("#more"),
  };
}

// Clicks "Older lines" and waits for its page to be added.
async function older(page) {
  const paged = await page.$eval("#lines", (t) => Number(t.dataset.paged || 0));
  await page.click("#more");
  await page.waitForFunction((n) => Number(document.querySelector("#lines").dataset.paged || 0) > n, paged, WAIT);
}

try {
  // A line whose payload holds integers past 2^53, opened.
  const big = await open(`${BASE_URL}/?from=${encodeURIComponent(BIG_FROM)}&to=${encodeURIComponent(BIG_TO)}`);
  await big.click("tr.line");
  await big.waitForSelector("tr.detail pre", WAIT);
  report("big", { text: await big.textContent("tr.detail pre") });
  await big.close();

  // Line 151 opened after one "Older lines", and its URL opened in a new tab.
  const page = await open(`${BASE_URL}/?${RANGE}`);
  report("first", await shows(page));
  await older(page);
  await page.click("tr.line >> nth=150");
  await page.waitForSelector("tr.detail", WAIT);
  const opened = await shows(page);
  report("opened-151", opened);
  const again = await open(page.url());
  report("shared-151", await shows(again));
  await again.close();
  // Closed again before paging on.
  await page.click("tr.line >> nth=150");

  // Paging back past the lines a page holds, one report a click.
  for (let click = 1; click <= CLICKS; click++) {
    await older(page);
    const { ids, status, more } = await shows(page);
    report("older", { click, count: ids.length, newest: ids[0], oldest: ids[ids.length - 1], status, more });
  }
  const deep = await shows(page);
  report("paged", deep);
  // A line deep in that view opened, and the URL shared.
  await page.click("tr.line >> nth=1500");
  await page.waitForSelector("tr.detail", WAIT);
  report("opened-deep", await shows(page));
  const shared = await open(page.url());
  report("shared-deep", await shows(shared));
  report("done", {});
} finally {
  await browser.close();
}
