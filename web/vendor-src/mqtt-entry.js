// The browser bundle of Debian's node-mqtt (MQTT.js 4): `mqttlib.default.connect(…)`.
export { default } from 'mqtt';
