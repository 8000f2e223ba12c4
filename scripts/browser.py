#!/usr/bin/python3
"""Drives headless Chromium over the DevTools protocol for the map page's tests.

    browser.py URL --wait SELECTOR [--wait SELECTOR …] [--eval JS …] [--screenshot OUT.png]
               [--size 1280x800] [--timeout S] [--offline]

Loads URL, waits for each CSS selector to match (a MutationObserver in the
page resolves the wait: no polling), evaluates each --eval expression (its
value, awaited if a promise, printed as one JSON line), then takes the
screenshot. Exits 0 when everything was found, 1 with the reason otherwise.
Chromium is Debian's `chromium`; the client is python3-websocket.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket  # python3-websocket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    def __init__(self, ws_url, timeout):
        self.ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("exception", {}).get("description", "exception"))
        return result["result"].get("value")


WAIT_FOR = """new Promise((resolve, reject) => {
  const selector = %s;
  const found = () => document.querySelector(selector);
  if (found()) return resolve(true);
  const observer = new MutationObserver(() => { if (found()) { observer.disconnect(); resolve(true); } });
  observer.observe(document, { subtree: true, childList: true, attributes: true });
  setTimeout(() => { observer.disconnect(); reject(new Error('no ' + selector + ' within %d s')); }, %d);
})"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--wait", action="append", default=[])
    parser.add_argument("--eval", action="append", default=[])
    parser.add_argument("--screenshot")
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--offline", action="store_true", help="no network at all while the page loads")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))

    port = free_port()
    profile = tempfile.mkdtemp(prefix="tracker-chromium-")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    process = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         f"--remote-debugging-port={port}", f"--user-data-dir={profile}", f"--window-size={width},{height}",
         "--remote-allow-origins=*", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The DevTools endpoint: asked until Chromium has opened it (bounded).
        deadline = time.monotonic() + args.timeout
        targets = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    targets = [t for t in json.load(r) if t.get("type") == "page"]
                if targets:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        if not targets:
            print("browser: Chromium's DevTools endpoint did not open", file=sys.stderr)
            return 1
        page = Page(targets[0]["webSocketDebuggerUrl"], args.timeout)
        page.call("Page.enable")
        page.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        if args.offline:
            page.call("Network.enable")
            page.call("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1, uploadThroughput=-1)
        page.call("Page.navigate", url=args.url)
        page.evaluate("new Promise(r => document.readyState === 'complete' ? r(true) : addEventListener('load', () => r(true)))")
        for selector in args.wait:
            page.evaluate(WAIT_FOR % (json.dumps(selector), int(args.timeout), int(args.timeout * 1000)))
            print(json.dumps({"found": selector}))
        for expression in args.eval:
            print(json.dumps({"eval": expression[:60], "value": page.evaluate(expression)}))
        if args.screenshot:
            import base64
            shot = page.call("Page.captureScreenshot", format="png")
            with open(args.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            print(json.dumps({"screenshot": args.screenshot}))
        return 0
    except Exception as error:  # the reason, for the test's failure message
        print(f"browser: {error}", file=sys.stderr)
        return 1
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
