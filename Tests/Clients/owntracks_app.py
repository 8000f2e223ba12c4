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
import threading
import time

import paho.mqtt.client as mqtt

host, port, user, password, device = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
drops = []
acked = set()
connected = threading.Event()
changed = threading.Condition()


def on_connect(client, userdata, flags, rc):
    if rc == 0:
        connected.set()
    else:
        drops.append(f"refused {rc}")


def on_disconnect(client, userdata, rc):
    drops.append(f"disconnected {rc}")


def on_publish(client, userdata, mid):
    with changed:
        acked.add(mid)
        changed.notify_all()


client = mqtt.Client(client_id=f"{user}-app", clean_session=False, protocol=mqtt.MQTTv311)
client.username_pw_set(user, password)
client.will_set(f"owntracks/{user}/{device}", json.dumps({"_type": "lwt", "tst": int(time.time())}), qos=1, retain=False)
client.on_connect, client.on_disconnect, client.on_publish = on_connect, on_disconnect, on_publish
client.connect(host, port, keepalive=60)
client.loop_start()
if not connected.wait(10):
    print(json.dumps({"connected": False, "drops": drops}))
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
mids = [client.publish(topic, json.dumps(body), qos=1, retain=True).mid for topic, body in messages]
mids.append(client.publish(base + "/waypoint", b"", qos=1, retain=True).mid)  # how the apps clear a retained message
with changed:
    changed.wait_for(lambda: set(mids) <= acked, timeout=10)
# A last round trip after everything: a dropped connection would show by now.
probe = client.publish(base + "/status", json.dumps({"_type": "status"}), qos=1)
probe.wait_for_publish(timeout=10)
with changed:
    all_acked = set(mids) <= acked and probe.mid in acked
client.disconnect()
client.loop_stop()
print(json.dumps({"connected": True, "acknowledged": all_acked, "published": len(mids) + 1,
                  "drops": [d for d in drops if d != "disconnected 0"]}))
