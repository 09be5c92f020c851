// Opens a page written by `lens report --html` in Debian's chromium (headless, driven by playwright-core from
// tests/peers) from file://, the way a person opens it from disk. Prints as JSON what the test compares with
// `lens report --json`: console errors, every request the page made other than its own file, the rank lanes of the
// timeline, the link lines, the chart series and the cells of the tables, then what zooming, a turn of the wheel and a
// click on a span show; keeps a screenshot.
//   node check_html_page.js PAGE.html SCREENSHOT.png PEERS_DIR
'use strict';
const path = require('path');

// What a person exploring the timeline sees: the range in view before and after two clicks on "Zoom in", the axis's
// tick labels then, the range after a turn of the wheel, and, the whole range shown again, the details a click on a
// span shows.
async function explore(page) {
  const range = () => page.evaluate(() => {
    const r = document.getElementById('visible-range');
    return r ? [Number(r.dataset.fromMs), Number(r.dataset.toMs)] : null;
  });
  const before = await range();
  if (before === null) return null;
  await page.click('#zoom-in');
  await page.click('#zoom-in');
  const zoomed = await range();
  const ticks = await page.evaluate(() => [...document.querySelectorAll('.axis-ticks text')].map((t) => t.textContent));
  const box = await page.locator('#timeline').boundingBox();
  await page.mouse.move(box.x + box.width * 0.6, box.y + 20);
  await page.mouse.wheel(0, 200);  // down: out, around the pointer
  const wheeled = await range();
  await page.click('#zoom-reset');
  // A span with attributes, wide enough to hit, inside the plot as it is now.
  const target = await page.evaluate(() => {
    const svg = document.getElementById('timeline'), box = svg.getBoundingClientRect();
    const scale = box.width / svg.viewBox.baseVal.width, label = Number(svg.dataset.label);
    const plot = {left: box.left + label * scale, right: box.left + (label + Number(svg.dataset.plot)) * scale};
    const spans = JSON.parse(document.getElementById('timeline-spans').textContent);
    for (const r of document.querySelectorAll('.timeline rect[data-i]')) {
      if (!Object.keys(spans[Number(r.dataset.i)].attributes).length) continue;
      const b = r.getBoundingClientRect();
      const left = Math.max(b.left, plot.left) + 1, right = Math.min(b.right, plot.right) - 1;  // the part in view
      const x = (left + right) / 2, y = b.top + b.height / 2;
      if (right - left >= 4 && document.elementFromPoint(x, y) === r)
        return {x, y, i: Number(r.dataset.i), title: r.querySelector('title').textContent};
    }
    return null;
  });
  let details = null;
  if (target) {
    await page.mouse.click(target.x, target.y);
    details = await page.evaluate(() => [...document.querySelectorAll('#span-attributes tr')].map(
        (tr) => [...tr.cells].map((td) => td.textContent)));
  }
  const spans = await page.evaluate(() => JSON.parse(document.getElementById('timeline-spans').textContent));
  return {before, zoomed, ticks, target, details, wheeled, clicked: target ? spans[target.i] : null};
}

async function main() {
  const [page_file, screenshot, peers] = process.argv.slice(2);
  const {chromium} = require(path.resolve(peers, 'node_modules', 'playwright-core'));
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    // As root, and on a machine with no network: no sandbox, no background connections.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage({viewport: {width: 1200, height: 900}});
    const url = 'file://' + path.resolve(page_file);
    const errors = [];
    const requests = [];
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('request', (r) => { if (r.url() !== url) requests.push(r.url()); });
    await page.goto(url, {waitUntil: 'load'});
    const seen = await page.evaluate(() => {
      const cells = (id) => [...document.querySelectorAll(`#${id} tbody tr`)].map(
          (tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent));
      return {
        title: document.title,
        rank_lanes: [...document.querySelectorAll('[data-rank-lane]')].map((g) => Number(g.dataset.rankLane)),
        spans_drawn: document.querySelectorAll('.timeline rect').length,
        device_spans_drawn: document.querySelectorAll('.timeline rect.device').length,
        device_labels: document.querySelectorAll('.timeline .device-label').length,
        links_drawn: document.querySelectorAll('.timeline line.link').length,
        // as a person sees it: a link line that slants back to the left runs backwards in time
        links_backwards: [...document.querySelectorAll('.timeline line.link')]
                             .filter((l) => l.x2.baseVal.value < l.x1.baseVal.value).length,
        compute_series: [...document.querySelectorAll('#compute polyline')].map((p) => p.dataset.series),
        loss_points: (document.querySelector('#loss polyline')?.getAttribute('points') || '').trim().split(/\s+/)
                         .filter(Boolean).length,
        phases: cells('phases'),
        stragglers: cells('stragglers'),
        bubble: cells('bubble'),
        verdict: document.querySelector('.verdict')?.textContent,
      };
    });
    const explored = await explore(page);
    await page.screenshot({path: screenshot, fullPage: true});
    console.log(JSON.stringify({errors, requests, ...seen, explored}));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
