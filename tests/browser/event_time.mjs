// The explorer in event time: a table with an event time opens in it (range, bars and line
// times), a visible switch turns the view to ID (arrival) time, and the URL carries which.
// Reports what the page shows, one JSON object per line, for tests/serve_browser.rs.
//
// Environment: BASE_URL (the server), FROM and TO (a range of event times), ARTEFACTS.
import { WAIT, launch, report } from "./chromium.mjs";

const { BASE_URL, FROM, TO, ARTEFACTS } = process.env;

const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("pageerror", (e) => report("page-error", { message: String(e) }));
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
  const shows = async () => ({
    total: await page.$eval("#total", (t) => Number(t.dataset.total)),
    time: await page.inputValue("#time"),
    switchVisible: await page.isVisible("#time"),
    heading: await page.textContent("#time-heading"),
    first: await page.$$eval("tr.line", (rows) => rows.slice(0, 1).map((r) => ({
      id: r.dataset.id, time: r.cells[0].textContent,
    }))),
    view: Object.fromEntries(new URL(page.url()).searchParams),
  });

  // No `time` in the URL: the table's event time.
  await page.goto(`${BASE_URL}/?from=${encodeURIComponent(FROM)}&to=${encodeURIComponent(TO)}`);
  await loadedAfter("");
  report("event", await shows());
  await page.screenshot({ path: `${ARTEFACTS}/event-time.png` });

  // The switch: ID time, the same range.
  let before = await ready();
  await page.selectOption("#time", "id");
  await loadedAfter(before);
  report("id", await shows());
  await page.screenshot({ path: `${ARTEFACTS}/id-time.png` });

  // Back: event time again, from the URL.
  before = await ready();
  await page.goBack();
  await loadedAfter(before);
  report("back", await shows());
  report("done", {});
} finally {
  await browser.close();
}
