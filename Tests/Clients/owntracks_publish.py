#!/usr/bin/python3
"""OwnTracks apps' messages as paho-mqtt sends them: MQTT 3.1.1, QoS 1, each
with its retain flag, payloads byte for byte as given. Reads the messages as
one JSON array of [topic, payload, retained] from MESSAGES_FILE, publishes
them in order, waits for every acknowledgement and prints one JSON line:
{"connected": …, "acknowledged": …, "published": N, "drops": […]}.

usage: owntracks_publish.py HOST PORT CLIENT_ID MESSAGES_FILE [USER PASSWORD]
"""
import json
import sys

from owntracks_client import App

host, port, client_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(sys.argv[4], encoding="utf-8") as f:
    messages = json.load(f)
user, password = (sys.argv[5], sys.argv[6]) if len(sys.argv) > 6 else (None, None)
app = App(host, port, client_id, user, password)
if not app.wait_connected(10):
    print(json.dumps({"connected": False, "drops": app.drops}))
    sys.exit(1)
mids = [app.publish(topic, payload.encode("utf-8"), retain=bool(retained)) for topic, payload, retained in messages]
all_acked = app.wait_acked(mids, timeout=20)
app.close()
print(json.dumps({"connected": True, "acknowledged": bool(all_acked), "published": len(mids),
                  "drops": app.unexpected_drops()}))
sys.exit(0 if all_acked else 1)
