"""An OTLP/HTTP receiver that counts what arrives, for bench/scale.py: requests, bytes on the wire, spans (each
request decoded with opentelemetry-proto, so a span counted is a span that arrived whole), metric points and log
records. It answers every request 200 with an empty response, as a healthy Collector does. On SIGTERM it stops
answering (a request then gets no answer, as from a receiver that is gone), lets the requests it is answering end,
writes its counts as JSON to the file named on its command line and exits.

    .venv/bin/python bench/otlp_counting_receiver.py PORT COUNTS.json
"""

import gzip
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (ExportLogsServiceRequest,
                                                                    ExportLogsServiceResponse)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (ExportMetricsServiceRequest,
                                                                          ExportMetricsServiceResponse)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                      ExportTraceServiceResponse)


def count_spans(request):
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def count_points(request):
    total = 0
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                total += len(getattr(m, kind).data_points) if kind else 0
    return total


def count_records(request):
    return sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)


SIGNALS = {"/v1/traces": ("spans", ExportTraceServiceRequest, ExportTraceServiceResponse, count_spans),
           "/v1/metrics": ("points", ExportMetricsServiceRequest, ExportMetricsServiceResponse, count_points),
           "/v1/logs": ("records", ExportLogsServiceRequest, ExportLogsServiceResponse, count_records)}


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.stopping, self.in_flight = False, 0
        self.values = {"requests": 0, "bytes": 0, "spans": 0, "points": 0, "records": 0, "bad_requests": 0,
                       "first_request_unix": None, "last_request_unix": None}

    def add(self, what, n, wire_bytes):
        with self.lock:
            v = self.values
            v["requests"] += 1
            v["bytes"] += wire_bytes
            v[what] += n
            now = time.time()
            v["first_request_unix"] = v["first_request_unix"] or now
            v["last_request_unix"] = now


COUNTS = Counts()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server's name)
        with COUNTS.lock:
            if COUNTS.stopping:  # as a receiver that is gone: no answer, nothing counted
                self.close_connection = True
                return
            COUNTS.in_flight += 1
        try:
            self.answer()
        finally:
            with COUNTS.lock:
                COUNTS.in_flight -= 1

    def answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        known = SIGNALS.get(self.path)
        try:
            what, request_type, response_type, count = known
            raw = gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body
            COUNTS.add(what, count(request_type.FromString(raw)), len(body))
            answer = response_type().SerializeToString()
            self.send_response(200)
        except Exception:  # an unknown path or an undecodable body: counted, refused
            with COUNTS.lock:
                COUNTS.values["bad_requests"] += 1
            answer = b""
            self.send_response(400)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_):
        pass


def main():
    port, output = int(sys.argv[1]), sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True

    def stop(*_):
        # What was answered is counted, what comes now is not: then the counts are those the senders saw accepted.
        with COUNTS.lock:
            COUNTS.stopping = True
        deadline = time.monotonic() + 5
        while COUNTS.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(output, "w", encoding="utf-8") as f:
            json.dump(COUNTS.values, f)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
