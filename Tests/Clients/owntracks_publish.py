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
import threading

import paho.mqtt.client as mqtt

host, port, client_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(sys.argv[4], encoding="utf-8") as f:
    messages = json.load(f)
user, password = (sys.argv[5], sys.argv[6]) if len(sys.argv) > 6 else (None, None)
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


client = mqtt.Client(client_id=client_id, clean_session=True, protocol=mqtt.MQTTv311)
if user is not None:
    client.username_pw_set(user, password)
client.on_connect, client.on_disconnect, client.on_publish = on_connect, on_disconnect, on_publish
client.connect(host, port, keepalive=60)
client.loop_start()
if not connected.wait(10):
    print(json.dumps({"connected": False, "drops": drops}))
    sys.exit(1)
mids = [client.publish(topic, payload.encode("utf-8"), qos=1, retain=bool(retained)).mid for topic, payload, retained in messages]
with changed:
    all_acked = changed.wait_for(lambda: set(mids) <= acked, timeout=20)
client.disconnect()
client.loop_stop()
print(json.dumps({"connected": True, "acknowledged": bool(all_acked), "published": len(mids),
                  "drops": [d for d in drops if d != "disconnected 0"]}))
sys.exit(0 if all_acked else 1)
