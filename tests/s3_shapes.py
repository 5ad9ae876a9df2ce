"""A loopback HTTP proxy in front of the moto S3 server that answers like another S3 implementation.

``MinioShape`` forwards every request unchanged (same Host header, so SigV4 signatures still verify)
and rewrites only failed conditional writes the way MinIO answers them: HTTP 412 with an error body that
names no ``Condition`` (AWS and moto add ``<Condition>If-None-Match</Condition>``; s3fs relies on it to
raise FileExistsError, and raises ``OSError(EINVAL)`` without it).
"""
from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

MINIO_412 = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PreconditionFailed</Code>'
             b'<Message>At least one of the pre-conditions you specified did not hold</Message>'
             b'<Resource>/</Resource><RequestId>17B0E2A7C8E9D3F1</RequestId></Error>')


class MinioShape:
    """``with MinioShape(upstream_endpoint) as endpoint:`` - an S3 endpoint that answers like MinIO."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.rewritten = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # answers "Expect: 100-continue" (botocore sends it on PUT)

            def log_message(self, *args: object) -> None:  # quiet
                return None

            def _body(self) -> bytes:
                if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()  # the blank line after the last chunk
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()

            def _forward(self) -> None:
                body = self._body()
                conn = http.client.HTTPConnection(outer.upstream.hostname, outer.upstream.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("expect", "transfer-encoding")}
                headers["Content-Length"] = str(len(body))
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                skip = ("transfer-encoding", "connection") + (() if self.command == "HEAD" else ("content-length",))
                headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in skip]
                if resp.status == 412:
                    outer.rewritten += 1
                    data = MINIO_412
                self.send_response(resp.status)
                for k, v in headers:
                    self.send_header(k, v)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
