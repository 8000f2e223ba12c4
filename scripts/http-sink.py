#!/usr/bin/env python3
"""A local HTTP sink for the uploader: answers POSTs as scripted and keeps
every body it accepted, one JSON line each.

  http-sink.py PORT OUT.jsonl [STATUS ...]

Each request takes the next STATUS from the list (`200`, `500`, `401`,
`429:30` for a Retry-After of 30 s, `slow:5` to stall 5 s then answer 200);
when the list is used up every request gets 200. Bodies of 2xx answers are
appended to OUT.jsonl."""
import http.server, sys, threading, time

port, out, script = int(sys.argv[1]), sys.argv[2], list(sys.argv[3:])
lock = threading.Lock()


class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with lock:
            step = script.pop(0) if script else "200"
        status, retry_after = 200, None
        if step.startswith("slow:"):
            time.sleep(float(step[5:]))
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
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
