#!/usr/bin/env python3
"""A local HTTP sink for the uploader: answers POSTs as scripted and keeps
every body it accepted, one JSON line each.

  http-sink.py [--bind ADDRESS] PORT OUT.jsonl [STATUS ...]

It listens on 127.0.0.1 unless --bind says otherwise (compose's `sink`
binds 0.0.0.0, to be reached from the uploader's container). A GET answers
200 and is not kept (a health check). SIGTERM ends it at once, as PID 1 of
a container too. It speaks HTTP/1.1 and keeps connections open, as a
customer's server would (every answer says its Content-Length).

Each request takes the next STATUS from the list (`200`, `500`, `401`,
`429:30` for a Retry-After of 30 s, `slow:5` to stall 5 s then answer 200,
`redirect:/p` for a 307 to that path, which also says Retry-After: 1);
when the list is used up every request gets 200. Bodies of 2xx answers are
appended to OUT.jsonl; a POST to /echo is kept as what its request looked
like instead: the client's port (one per connection), its Content-Length,
User-Agent and X-Empty headers."""
import http.server, json, signal, sys, threading, time

args = sys.argv[1:]
bind = "127.0.0.1"
if args[:1] == ["--bind"]:
    bind, args = args[1], args[2:]
port, out, script = int(args[0]), args[1], list(args[2:])
lock = threading.Lock()


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; http.server's default, 1.0, closes after each answer

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/echo":
            body = json.dumps({"port": self.client_address[1], "contentLength": self.headers.get("Content-Length"),
                               "userAgent": self.headers.get("User-Agent"), "empty": self.headers.get("X-Empty")}).encode()
        with lock:
            step = script.pop(0) if script else "200"
        status, retry_after, location = 200, None, None
        if step.startswith("slow:"):
            time.sleep(float(step[5:]))
        elif step.startswith("redirect:"):
            status, location, retry_after = 307, step[9:], "1"
        elif step.startswith("429:"):
            status, retry_after = 429, step[4:]
        else:
            status = int(step)
        if 200 <= status < 300:
            with lock, open(out, "ab") as f:
                f.write((body or self.path.encode()) + b"\n")
        self.send_response(status)
        if retry_after:
            self.send_header("Retry-After", retry_after)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


# A process's default for SIGTERM is ignored when it is a container's PID 1.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
http.server.ThreadingHTTPServer((bind, port), Sink).serve_forever()
