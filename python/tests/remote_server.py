"""An HTTP/1.1 object server for test_remote.py, run in a process of its own
(so that DataLoader workers forked by a test inherit none of its sockets):

    python3 remote_server.py ROOT PORT_FILE [--tls CERT KEY]

It serves the files under ROOT (GET and HEAD) with an ETag (from the SHA-256
of the content), Last-Modified, Content-Length and keep-alive; answers
``Range: bytes=N-`` and ``bytes=N-M`` with 206 and its Content-Range, an If-Match that differs
from the ETag with 412, and a missing file with 404 and the body
"no such object: PATH". Its port goes to PORT_FILE once it listens.

Control requests (never logged):
    POST /__fault__  a JSON object: the next request for "path" is answered
                     with "status" (and "body", "headers"), or gets "cut_after" bytes of
                     the body and the connection closed, or "stall" seconds of
                     silence after "stall_after" bytes, or "etag" for the
                     object's ETag (a replaced object); "times" (1) requests
                     in a row get it. Faults of one path apply in order.
    GET /__log__     the requests so far: [{"method", "path", "peer" (the
                     client's port: one per connection), "headers"}], header
                     names lower-case.
"""

import email.utils
import hashlib
import http.server
import json
import os
import socket
import ssl
import sys
import threading
import time


class State:
    def __init__(self, root):
        self.root = root
        self.lock = threading.Lock()
        self.log = []
        self.faults = []

    def next_fault(self, path):
        with self.lock:
            for fault in self.faults:
                if fault["path"] == path:
                    fault["times"] -= 1
                    if fault["times"] <= 0:
                        self.faults.remove(fault)
                    return fault
        return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path != "/__fault__":
            return self.answer(404, b"no such control")
        fault = json.loads(body)
        fault.setdefault("times", 1)
        with self.state.lock:
            self.state.faults.append(fault)
        self.answer(200, b"ok")

    def do_HEAD(self):
        self.serve(head=True)

    def do_GET(self):
        if self.path == "/__log__":
            with self.state.lock:
                data = json.dumps(self.state.log).encode()
            return self.answer(200, data)
        self.serve(head=False)

    def answer(self, status, body, head=False, headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def serve(self, head):
        entry = {"method": self.command, "path": self.path, "peer": self.client_address[1],
                 "headers": {k.lower(): v for k, v in self.headers.items()}}
        with self.state.lock:
            self.state.log.append(entry)
        fault = self.state.next_fault(self.path)
        if fault is not None and "delay" in fault:
            time.sleep(fault["delay"])  # before the answer: a slow first byte
            with self.state.lock:
                entry["answered"] = time.time()
        if fault is not None and "status" in fault:
            return self.answer(fault["status"], fault.get("body", "").encode(), head,
                               fault.get("headers", {}).items())
        file = os.path.join(self.state.root, self.path.split("?")[0].lstrip("/"))
        if not os.path.isfile(file):
            return self.answer(404, f"no such object: {self.path}".encode(), head)
        with open(file, "rb") as f:
            data = f.read()
        etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
        if fault is not None and "etag" in fault:
            etag = fault["etag"]  # as if the object had been replaced
        validators = [("ETag", etag), ("Last-Modified",
                                       email.utils.formatdate(os.path.getmtime(file),
                                                              usegmt=True))]
        if_match = self.headers.get("If-Match")
        if if_match is not None and if_match != etag:
            return self.answer(412, b"precondition failed", head)
        start, end = 0, len(data)
        status = 200
        headers = list(validators)
        requested = self.headers.get("Range")
        if requested is not None:
            first, last = requested.removeprefix("bytes=").split("-")
            start = int(first)
            if last:
                end = min(end, int(last) + 1)
            if start >= len(data):
                return self.answer(416, b"range not satisfiable", head)
            status = 206
            headers.append(("Content-Range", f"bytes {start}-{end - 1}/{len(data)}"))
        body = data[start:end]
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        if fault is not None and "cut_after" in fault:
            self.wfile.write(body[:fault["cut_after"]])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if fault is not None and "stall" in fault:
            self.wfile.write(body[:fault.get("stall_after", 0)])
            self.wfile.flush()
            time.sleep(fault["stall"])
            body = body[fault.get("stall_after", 0):]
        self.wfile.write(body)


def main():
    root, port_file = sys.argv[1], sys.argv[2]
    Handler.state = State(root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if len(sys.argv) > 3 and sys.argv[3] == "--tls":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[4], sys.argv[5])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
