// Checks a Chrome trace written by `lens convert --to chrome-json` (plain or .gz) the way Perfetto UI and
// chrome://tracing read it: complete events nest strictly on each track, every flow has both ends and each end lies
// on a span of its track, every process is named `rank R (pp S, dp D)` (with ` pid N` for a rank's second process).
// Prints a summary as JSON; exits 1 with the violations.
//   node check_chrome_trace.js FILE
'use strict';
const fs = require('fs');
const zlib = require('zlib');

const file = process.argv[2];
let bytes = fs.readFileSync(file);
if (file.endsWith('.gz')) bytes = zlib.gunzipSync(bytes);
const trace = JSON.parse(bytes.toString('utf8'));
const events = trace.traceEvents;
const problems = [];
const names = new Map();  // pid -> process name
const tracks = new Map();  // "pid/tid" -> complete events
const flows = new Map();  // id -> {s, f}
// Nanosecond-exact times: ts is written with three decimals.
const ns = (ts) => Math.round(ts * 1000);

for (const e of events) {
  if (e.ph === 'M' && e.name === 'process_name') names.set(e.pid, e.args.name);
  if (e.ph === 'X') {
    const key = `${e.pid}/${e.tid}`;
    if (!tracks.has(key)) tracks.set(key, []);
    tracks.get(key).push({start: ns(e.ts), end: ns(e.ts) + ns(e.dur), name: e.name});
  }
  if (e.ph === 's' || e.ph === 'f') {
    if (!flows.has(e.id)) flows.set(e.id, {});
    const flow = flows.get(e.id);
    if (flow[e.ph]) problems.push(`flow ${e.id} has two '${e.ph}' ends`);
    flow[e.ph] = e;
  }
}

for (const [key, spans] of tracks) {
  spans.sort((a, b) => a.start - b.start || b.end - a.end);
  const open = [];
  for (const s of spans) {
    while (open.length && open[open.length - 1].end <= s.start) open.pop();
    const parent = open[open.length - 1];
    if (parent && s.end > parent.end)
      problems.push(`track ${key}: ${s.name} [${s.start}, ${s.end}] overlaps ${parent.name} [${parent.start}, ${parent.end}]`);
    open.push(s);
  }
}

const onSpan = (e) => (tracks.get(`${e.pid}/${e.tid}`) || []).some((s) => s.start <= ns(e.ts) && ns(e.ts) <= s.end);
for (const [id, flow] of flows) {
  if (!flow.s || !flow.f) problems.push(`flow ${id} has one end only`);
  for (const end of [flow.s, flow.f]) if (end && !onSpan(end)) problems.push(`flow ${id}: an end on no span`);
}

const ranks = [];
for (const [pid, name] of names) {
  const m = /^rank (\d+) \(pp (\d+), dp (\d+)\)( pid \d+)?$/.exec(name);
  if (!m) problems.push(`process ${pid} is named '${name}'`);
  else ranks.push({pid, rank: Number(m[1]), pp: Number(m[2]), dp: Number(m[3]), second: Boolean(m[4])});
}
for (const key of tracks.keys()) {
  const pid = Number(key.split('/')[0]);
  if (!names.has(pid)) problems.push(`process ${pid} has spans and no name`);
}

const summary = {
  processes: ranks.sort((a, b) => a.pid - b.pid),
  tracks: tracks.size,
  complete_events: [...tracks.values()].reduce((n, t) => n + t.length, 0),
  flows: flows.size,
  problems,
};
console.log(JSON.stringify(summary));
process.exit(problems.length ? 1 : 0);
