"""What the tests' OwnTracks apps share: a paho-mqtt client over MQTT 3.1.1
that remembers every drop of its connection and waits for acknowledgements."""
import threading

import paho.mqtt.client as mqtt


class App:
    def __init__(self, host, port, client_id, user=None, password=None, clean_session=True, will=None):
        self.drops = []
        self.acked = set()
        self._connected = threading.Event()
        self._changed = threading.Condition()
        self.client = mqtt.Client(client_id=client_id, clean_session=clean_session, protocol=mqtt.MQTTv311)
        if user is not None:
            self.client.username_pw_set(user, password)
        if will is not None:
            topic, payload = will
            self.client.will_set(topic, payload, qos=1, retain=False)
        self.client.on_connect, self.client.on_disconnect, self.client.on_publish = self._on_connect, self._on_disconnect, self._on_publish
        self.client.connect(host, port, keepalive=60)
        self.client.loop_start()

    def _on_connect(self, client, userdata, flags, rc):
        if rc == 0:
            self._connected.set()
        else:
            self.drops.append(f"refused {rc}")

    def _on_disconnect(self, client, userdata, rc):
        self.drops.append(f"disconnected {rc}")

    def _on_publish(self, client, userdata, mid):
        with self._changed:
            self.acked.add(mid)
            self._changed.notify_all()

    def wait_connected(self, timeout=10):
        return self._connected.wait(timeout)

    def publish(self, topic, payload, retain):
        """Publishes at QoS 1; returns the message id."""
        return self.client.publish(topic, payload, qos=1, retain=retain).mid

    def wait_acked(self, mids, timeout):
        with self._changed:
            return self._changed.wait_for(lambda: set(mids) <= self.acked, timeout=timeout)

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()

    def unexpected_drops(self):
        """Every drop but our own clean disconnect."""
        return [d for d in self.drops if d != "disconnected 0"]
