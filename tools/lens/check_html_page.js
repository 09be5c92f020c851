// Opens a page written by `lens report --html` in Debian's chromium (headless, driven by playwright-core from
// tests/peers) from file://, the way a person opens it from disk. Prints as JSON what the test compares with
// `lens report --json`: console errors, every request the page made other than its own file, the rank lanes of the
// timeline, the link lines, the chart series and the cells of the tables; keeps a screenshot.
//   node check_html_page.js PAGE.html SCREENSHOT.png PEERS_DIR
'use strict';
const path = require('path');

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
        step_series: [...document.querySelectorAll('#step-time polyline')].map((p) => p.dataset.series),
        loss_points: (document.querySelector('#loss polyline')?.getAttribute('points') || '').trim().split(/\s+/)
                         .filter(Boolean).length,
        phases: cells('phases'),
        stragglers: cells('stragglers'),
        bubble: cells('bubble'),
        verdict: document.querySelector('.verdict')?.textContent,
      };
    });
    await page.screenshot({path: screenshot, fullPage: true});
    console.log(JSON.stringify({errors, requests, ...seen}));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
