#!/usr/bin/env python3
"""http_server.py — a tiny HTTP/1.1 file server on 127.0.0.1 for tests/test_http.c.

It serves the files of --root with the parts of HTTP a resumable download needs and
Debian's `python3 -m http.server` lacks: byte ranges (Range: bytes=A- and bytes=A-B,
206 with Content-Range, 416 past the end), an ETag and If-Range. And it misbehaves on
request, per file name, so that the client's error paths can be tested:

  --cut NAME=N      the first GET of NAME sends N body bytes (Content-Length promises
                    the whole file), then drops the connection; later GETs are whole
  --corrupt NAME    every GET of NAME flips the bits of the body's first byte
  --missing NAME    NAME answers 404 although the file exists
  --status NAME=C   NAME answers with HTTP status C (e.g. 500, 403)
  --bind ADDR       the address to listen on (default 127.0.0.1; tools/netns.sh gives
                    a test host's address inside its namespace)

Every request is appended to --log as one line: METHOD PATH range=RANGE status=CODE,
so a test can assert that a Range request was really made. The chosen port goes to
--port-file (written atomically) once the socket listens.

Not for: anything but tests on loopback or inside test namespaces.
"""
import argparse
import hashlib
import http.server
import os
import re
import socket
import sys
import threading


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--cut", action="append", default=[])
    ap.add_argument("--corrupt", action="append", default=[])
    ap.add_argument("--missing", action="append", default=[])
    ap.add_argument("--status", action="append", default=[])
    ap.add_argument("--bind", default="127.0.0.1")
    a = ap.parse_args()
    cut = {}
    for c in a.cut:
        name, n = c.rsplit("=", 1)
        cut[name.lstrip("/")] = int(n)
    status = {}
    for s in a.status:
        name, code = s.rsplit("=", 1)
        status[name.lstrip("/")] = int(code)
    corrupt = {c.lstrip("/") for c in a.corrupt}
    missing = {m.lstrip("/") for m in a.missing}
    lock = threading.Lock()
    logf = open(a.log, "a", buffering=1)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet on stderr
            pass

        def note(self, code):
            with lock:
                logf.write("%s %s range=%s status=%d\n" % (
                    self.command, self.path, self.headers.get("Range", "-"), code))

        def fail(self, code, text):
            body = (text + "\n").encode()
            self.note(code)
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            name = self.path.split("?", 1)[0].lstrip("/")
            if name in status:
                return self.fail(status[name], "status %d on request" % status[name])
            path = os.path.join(a.root, name)
            if ".." in name.split("/") or name in missing or not os.path.isfile(path):
                return self.fail(404, "not found")
            with open(path, "rb") as f:
                data = f.read()
            if name in corrupt and data:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            etag = '"%s"' % hashlib.sha256(data).hexdigest()[:16]
            size = len(data)
            start, end, code = 0, size - 1, 200
            rng = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            if rng and (if_range is None or if_range == etag):
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
                if not m:
                    return self.fail(416, "bad range")
                start = int(m.group(1))
                end = int(m.group(2)) if m.group(2) else size - 1
                if start >= size:
                    self.note(416)
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % size)
                    self.send_header("Content-Length", "0")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    return
                end = min(end, size - 1)
                code = 206
            body = data[start:end + 1]
            self.note(code)
            self.send_response(code)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Connection", "close")
            if code == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
            self.end_headers()
            if self.command == "HEAD":
                return
            with lock:
                n = cut.pop(name, None)
            if n is not None and n < len(body):
                self.wfile.write(body[:n])
                self.wfile.flush()
                try:  # drop the connection mid-body, as a dying link would
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self.close_connection = True
                return
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer((a.bind, 0), Handler)
    srv.daemon_threads = True
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, a.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
