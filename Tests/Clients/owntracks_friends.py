#!/usr/bin/python3
"""An OwnTracks app looking at its friends, as the tests play it: paho-mqtt
over MQTT 3.1.1, logged in with its own account. It publishes its location
(retained, QoS 1), subscribes as the apps do by default (`owntracks/+/+`,
`owntracks/+/+/info`) and then to its own `cmd` topic. The second
subscription's acknowledgement follows every retained message of the first
(the broker answers in order), so once it is in, what the app was allowed to
see has arrived. A `reportLocation` command is answered with a location
(`t: "r"`), as the apps do.

It ends when every topic in UNTIL has been seen and, with ANSWERS > 0, that
many commands were answered, or after TIMEOUT seconds, and prints one JSON
line: {"seen": {topic: payload}, "answered": N, "barrier": bool, "drops": […]}.

usage: owntracks_friends.py HOST PORT LOGIN PASSWORD USER DEVICE UNTIL ANSWERS TIMEOUT
       (UNTIL: topics separated by commas, or "-" for none)
"""
import json
import sys
import threading
import time

from owntracks_client import App

host, port, login, password, user, device = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
until = [] if sys.argv[7] == "-" else sys.argv[7].split(",")
answers, timeout = int(sys.argv[8]), float(sys.argv[9])
base = f"owntracks/{user}/{device}"

seen, answered, barrier = {}, [0], threading.Event()
changed = threading.Condition()
app = App(host, port, f"{login}-friends", login, password)


def location(trigger=None):
    # An answer is a new fix: a second on from anything sent before it, whatever the clock says.
    body = {"_type": "location", "lat": 48.137, "lon": 11.575, "acc": 8, "tst": int(time.time()) + (1 + answered[0] if trigger else 0)}
    if trigger:
        body["t"] = trigger
    return json.dumps(body)


def on_message(client, userdata, message):
    text = message.payload.decode("utf-8", "replace")
    with changed:
        seen[message.topic] = text
        if message.topic == base + "/cmd" and json.loads(text or "{}").get("action") == "reportLocation":
            client.publish(base, location("r"), qos=1, retain=True)
            answered[0] += 1
        changed.notify_all()


def on_subscribe(client, userdata, mid, granted_qos):
    with changed:  # held by the main thread until cmd_mid is known
        if mid == cmd_mid[0]:
            barrier.set()
            changed.notify_all()


cmd_mid = [None]
app.client.on_message, app.client.on_subscribe = on_message, on_subscribe
if not app.wait_connected(10):
    print(json.dumps({"connected": False, "drops": app.drops}))
    sys.exit(1)
app.wait_acked([app.publish(base, location(), retain=True)], timeout=10)
with changed:
    app.client.subscribe([("owntracks/+/+", 1), ("owntracks/+/+/info", 1)])
    cmd_mid[0] = app.client.subscribe(base + "/cmd", qos=1)[1]
    changed.wait_for(lambda: barrier.is_set() and all(t in seen for t in until) and answered[0] >= answers, timeout=timeout)
app.close()
print(json.dumps({"connected": True, "seen": seen, "answered": answered[0], "barrier": barrier.is_set(),
                  "drops": app.unexpected_drops()}))
