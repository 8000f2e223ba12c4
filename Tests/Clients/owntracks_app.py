#!/usr/bin/python3
"""An OwnTracks app as the tests play it: paho-mqtt over MQTT 3.1.1, QoS 1,
retained, logged in with the device's own account. It publishes a location
and then a message on each of the apps' sub-topics (and the empty retained
payload the apps use to clear one), waits for every acknowledgement, and says
as one JSON line whether the broker ever dropped its connection.

usage: owntracks_app.py HOST PORT USER PASSWORD DEVICE
"""
import json
import sys
import time

from owntracks_client import App

host, port, user, password, device = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
app = App(host, port, f"{user}-app", user, password, clean_session=False,
          will=(f"owntracks/{user}/{device}", json.dumps({"_type": "lwt", "tst": int(time.time())})))
if not app.wait_connected(10):
    print(json.dumps({"connected": False, "drops": app.drops}))
    sys.exit(1)

now = int(time.time())
base = f"owntracks/{user}/{device}"
messages = [
    (base, {"_type": "location", "tid": "ph", "lat": 48.137, "lon": 11.575, "acc": 12, "tst": now}),
    (base + "/event", {"_type": "transition", "event": "enter", "desc": "Home", "lat": 48.137, "lon": 11.575, "acc": 12,
                       "tst": now, "wtst": now - 3600, "t": "c"}),
    (base + "/cmd", {"_type": "cmd", "action": "reportLocation"}),
    (base + "/waypoint", {"_type": "waypoint", "desc": "Home", "lat": 48.137, "lon": 11.575, "rad": 100, "tst": now - 3600}),
    (base + "/waypoints", {"_type": "waypoints", "waypoints": []}),
    (base + "/info", {"_type": "card", "name": "Jane", "tid": "ph"}),
    (base + "/status", {"_type": "status", "android": {"wifi": 1}}),
    (base + "/dump", {"_type": "configuration"}),
]
mids = [app.publish(topic, json.dumps(body), retain=True) for topic, body in messages]
mids.append(app.publish(base + "/waypoint", b"", retain=True))  # how the apps clear a retained message
app.wait_acked(mids, timeout=10)
# A last round trip after everything: a dropped connection would show by now.
probe = app.publish(base + "/status", json.dumps({"_type": "status"}), retain=False)
all_acked = app.wait_acked(mids + [probe], timeout=10)
app.close()
print(json.dumps({"connected": True, "acknowledged": bool(all_acked), "published": len(mids) + 1,
                  "drops": app.unexpected_drops()}))
