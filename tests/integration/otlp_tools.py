"""A real OTLP/HTTP receive for the tracing tests: a tiny collector in the test process that
decodes the exporters' protobuf posts to ``/v1/traces`` (gzipped or not) and keeps every span.
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class Collected(NamedTuple):
    """A span as it arrived: its IDs in hex (``parent`` empty for a root), and its name."""

    trace_id: str
    span_id: str
    parent: str
    name: str


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint on loopback: keeps every span posted."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receive)
        self.spans: list[Collected] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def trace(self, trace_id: str) -> list[Collected]:
        """The spans of one trace received so far."""
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]


class _Receive(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    self.server.spans.extend(
                        Collected(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                                  s.name)
                        for s in scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return
