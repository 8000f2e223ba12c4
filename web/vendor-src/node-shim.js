// What MQTT.js expects of Node in a browser: `process` (its title says
// "browser", so it uses the browser's own WebSocket) and `Buffer`.
export const process = { title: 'browser', browser: true, env: {}, argv: [], version: '', versions: {},
  nextTick: (fn, ...args) => queueMicrotask(() => fn(...args)) };
export { Buffer } from 'buffer';
