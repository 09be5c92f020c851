// Decodes an OTLP export request (protobuf bytes in a file) with protobufjs and the official OpenTelemetry
// .proto files shipped in @elastic/mockotlpserver, and prints it in the OTLP/JSON form lens writes (hex ids,
// 64-bit integers as strings, enums as numbers, NaN and infinities as strings), for the tests to compare.
//   node decode_otlp.js traces|metrics|logs FILE
'use strict';
const fs = require('fs');
const path = require('path');
const protobuf = require('protobufjs');

const [signal, file] = process.argv.slice(2);
const root = new protobuf.Root();
const protoDir = path.join(path.dirname(require.resolve('@elastic/mockotlpserver/package.json')));
root.resolvePath = (_origin, target) => path.join(protoDir, target);
const services = {
  traces: ['opentelemetry/proto/collector/trace/v1/trace_service.proto',
           'opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest'],
  metrics: ['opentelemetry/proto/collector/metrics/v1/metrics_service.proto',
            'opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest'],
  logs: ['opentelemetry/proto/collector/logs/v1/logs_service.proto',
         'opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest'],
};
const [protoFile, typeName] = services[signal];
root.loadSync(protoFile);
const Type = root.lookupType(typeName);
const message = Type.decode(fs.readFileSync(file));
const object = Type.toObject(message, { longs: String, enums: Number, bytes: String, defaults: false });

const idKeys = new Set(['traceId', 'spanId', 'parentSpanId']);
function normalise(value, key) {
  if (Array.isArray(value)) return value.map((v) => normalise(v, key));
  if (value !== null && typeof value === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = normalise(v, k);
    return out;
  }
  if (typeof value === 'string' && idKeys.has(key)) return Buffer.from(value, 'base64').toString('hex');
  if (typeof value === 'number' && !Number.isFinite(value)) {
    return Number.isNaN(value) ? 'NaN' : value > 0 ? 'Infinity' : '-Infinity';
  }
  return value;
}
process.stdout.write(JSON.stringify(normalise(object)));
