// Checks a Chrome trace written by `lens convert --to chrome-json` (plain or .gz) the way viewers read it:
// complete events nest strictly on each track, every flow has both ends and each end lies on a span of its track,
// every process is named `rank R (pp S, dp D)` (with ` pid N` for a rank's second process), every event but the
// metadata has a category, the file says its displayTimeUnit and metadata.startTime. Then a real consumer: the
// Chrome DevTools trace engine (@paulirish/trace_engine, from PEERS_DIR) parses the trace and resolves its flows:
// every flow must be bound to two spans, and run forward in time.
// Prints a summary as JSON; exits 1 with the violations.
//   node check_chrome_trace.js FILE PEERS_DIR
'use strict';
const path = require('path');
const fs = require('fs');
const zlib = require('zlib');

const file = process.argv[2];
let bytes = fs.readFileSync(file);
if (file.endsWith('.gz')) bytes = zlib.gunzipSync(bytes);
const trace = JSON.parse(bytes.toString('utf8'));
const events = trace.traceEvents;
const problems = [];
if (!['ms', 'ns'].includes(trace.displayTimeUnit)) problems.push(`displayTimeUnit is ${trace.displayTimeUnit}`);
if (!trace.metadata || Number.isNaN(Date.parse(trace.metadata.startTime)))
  problems.push(`metadata.startTime is not a time: ${JSON.stringify(trace.metadata)}`);
const uncategorised = events.filter((e) => e.ph !== 'M' && !e.cat).length;
if (uncategorised) problems.push(`${uncategorised} events have no category`);
const names = new Map();  // pid -> process name
const threadNames = new Map();  // "pid/tid" -> thread name
const tracks = new Map();  // "pid/tid" -> complete events
const flows = new Map();  // id -> {s, f}
// Nanosecond-exact times: ts is written with three decimals.
const ns = (ts) => Math.round(ts * 1000);

for (const e of events) {
  if (e.ph === 'M' && e.name === 'process_name') names.set(e.pid, e.args.name);
  if (e.ph === 'M' && e.name === 'thread_name') threadNames.set(`${e.pid}/${e.tid}`, e.args.name);
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

// The DevTools trace engine binds each flow end to the event of its pid, tid, ts and category; a flow it binds is
// the list of the events it joins, in time order of its ends.
async function devtoolsFlows(peers) {
  const engine = path.resolve(peers, 'node_modules', '@paulirish', 'trace_engine', 'models', 'trace', 'trace.js');
  const Trace = await import(engine);
  const model = Trace.TraceModel.Model.createWithAllHandlers();
  await model.parse(events);
  return model.parsedTrace().data.Flows.flows;
}

async function main() {
  const bound = await devtoolsFlows(process.argv[3]);
  // The engine lists a flow's events in the file's order (a send on a later rank comes after its receive's rank), so
  // the direction is the file's own: from the "s" end to the "f" end.
  const backwards = [...flows.values()].filter((f) => f.s && f.f && Number(f.f.ts) < Number(f.s.ts)).length;
  const unbound = bound.filter((f) => f.length !== 2).length;
  if (bound.length !== flows.size) problems.push(`the DevTools trace engine bound ${bound.length} of ${flows.size} flows`);
  if (unbound) problems.push(`the DevTools trace engine bound ${unbound} flows to other than two events`);
  if (backwards) problems.push(`${backwards} flows run backwards in time`);
  const summary = {
    processes: ranks.sort((a, b) => a.pid - b.pid),
    tracks: tracks.size,
    complete_events: [...tracks.values()].reduce((n, t) => n + t.length, 0),
    // a rank's GPU track (docs/GPU.md): its device spans, on threads named "device..." that hold nothing else
    device_events: Object.fromEntries([...names.keys()].map((pid) => [names.get(pid),
      [...tracks].filter(([key]) => key.startsWith(`${pid}/`) && (threadNames.get(key) || '').startsWith('device'))
        .reduce((n, [, spans]) => n + spans.length, 0)])),
    device_tracks_hold_only_device_spans: [...tracks].every(([key, spans]) =>
      (threadNames.get(key) || '').startsWith('device') === spans.every((x) => x.name.endsWith('.device'))),
    flows: flows.size,
    devtools_bound_flows: bound.length,
    backwards_flows: backwards,
    problems,
  };
  console.log(JSON.stringify(summary));
  process.exit(problems.length ? 1 : 0);
}
main();
