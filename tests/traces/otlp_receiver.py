"""An OTLP/HTTP (protobuf) trace receiver for muster's traces tests.

Listens on 127.0.0.1 (an ephemeral port unless one is given), prints `listening PORT`, then
one JSON line per event on stdout: `{"connection": N, "peer_port": P}` for each accepted TCP connection, and
one `{"span": ...}` line per span of each export request, decoded by the OpenTelemetry
project's own protobuf bindings (`opentelemetry-proto`). `--delay SECONDS` answers each
request that late (a slow collector). It stops when its stdin closes.
"""

import argparse
import json
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

LOCK = threading.Lock()
CONNECTIONS = 0


def emit(line):
    with LOCK:
        sys.stdout.write(json.dumps(line, sort_keys=True) + "\n")
        sys.stdout.flush()


def any_value(value):
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


def attributes(pairs):
    return {kv.key: any_value(kv.value) for kv in pairs}


class Handler(BaseHTTPRequestHandler):
    delay = 0.0
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower().startswith("x-")}
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    emit({"span": {
                        "path": self.path,
                        "content_type": self.headers.get("content-type"),
                        "headers": headers,
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "status": span.status.code,
                        "attributes": attributes(span.attributes),
                    }})
        if self.delay:
            time.sleep(self.delay)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def get_request(self):
        global CONNECTIONS
        accepted = super().get_request()
        with LOCK:
            CONNECTIONS += 1
            n = CONNECTIONS
        emit({"connection": n, "peer_port": accepted[1][1]})
        return accepted


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    Handler.delay = args.delay
    server = Server(("127.0.0.1", args.port), Handler)
    emit({"listening": server.server_address[1]})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
