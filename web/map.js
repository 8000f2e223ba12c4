// The fleet live, and a device's day: connects to the broker that serves
// this page (MQTT over WebSockets, with the map's read-only account),
// takes the fleet's live frames from the track service (getLive), follows
// the live frames and the events, and asks the track service for built
// tracks. Read-only: it publishes nothing but the
// queries below, and the broker's ACL holds it to that.
(function () {
  'use strict';

  const settings = Object.assign({ prefix: 'tracker', tiles: null, attribution: '' }, window.TRACKER_MAP || {});
  for (const [key, value] of new URLSearchParams(location.hash.slice(1))) settings[key] = value;

  const STATE_COLOURS = { moving: '#2b9348', stopPending: '#f4a261', stationary: '#6a4c93' };
  const map = L.map('map', { preferCanvas: true, zoomControl: true }).setView([20, 0], 2);
  if (settings.tiles) L.tileLayer(settings.tiles, { attribution: settings.attribution, maxZoom: 19 }).addTo(map);
  L.control.scale({ imperial: false }).addTo(map);
  const mapElement = document.getElementById('map');
  const list = document.getElementById('devices');
  const eventLog = document.getElementById('events');
  const status = document.getElementById('status');

  /// Every device seen: its layers, latest frame, last event, list entry.
  const devices = new Map();
  /// Frames waiting for the next animation frame, with when they came: only the newest per device is drawn.
  const pending = new Map();
  let followed = null;
  let fitted = false;
  let trackLayer = null;
  let refresh = null;

  // What the page costs, for the benchmark: per animation frame, the time to apply the frames.
  const stats = window.trackerMapStats = { ticks: 0, frames: 0, updates: 0, applyMs: [], tickMs: [], lastTick: 0, since: performance.now() };
  /// The benchmark's summary: animation frames a second, and the time to apply a frame's updates.
  window.trackerMapSummary = () => {
    const sorted = stats.applyMs.slice().sort((a, b) => a - b);
    const at = q => sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : 0;
    const seconds = (performance.now() - stats.since) / 1000;
    // Frame to frame, everything included (Leaflet redrawing its canvas too): the page's smoothness.
    const ticks = stats.tickMs.slice().sort((a, b) => a - b);
    return { seconds, ticksPerSecond: stats.ticks / seconds, updatesPerSecond: stats.updates / seconds, frames: stats.frames,
             applyP50: at(0.5), applyP95: at(0.95), applyMax: sorted.length ? sorted[sorted.length - 1] : 0,
             frameP95: ticks.length ? ticks[Math.floor(0.95 * ticks.length)] : 0, frameMax: ticks.length ? ticks[ticks.length - 1] : 0 };
  };
  window.trackerMapReset = () => Object.assign(stats, { ticks: 0, frames: 0, updates: 0, applyMs: [], tickMs: [], lastTick: 0, since: performance.now() });

  function say(text) { status.textContent = text; }

  function device(id) {
    let d = devices.get(id);
    if (d) return d;
    const item = document.createElement('li');
    item.dataset.device = id;
    item.innerHTML = '<span class="name"></span><span class="state"></span><span class="age"></span><div class="last"></div>';
    item.querySelector('.name').textContent = id;
    item.addEventListener('click', () => follow(id));
    list.appendChild(item);
    d = { id, item, frame: null, lastEvent: null, marker: null, heading: null, tail: null };
    devices.set(id, d);
    return d;
  }

  function draw(d, frame) {
    const at = [frame.latitude, frame.longitude];
    const colour = STATE_COLOURS[frame.motion] || '#1d3557';
    if (!d.marker) {
      d.tail = L.polyline([], { color: '#1d3557', weight: 2, opacity: 0.5, interactive: false }).addTo(map);
      d.heading = L.polyline([at, at], { color: colour, weight: 3, interactive: false }).addTo(map);
      d.marker = L.circleMarker(at, { radius: 7, color: 'white', weight: 2, fillColor: colour, fillOpacity: 1 })
        .bindTooltip(d.id).on('click', () => follow(d.id)).addTo(map);
    }
    d.marker.setLatLng(at).setStyle({ fillColor: colour });
    pointHeading(d);
    d.heading.setStyle({ color: colour });
    d.tail.setLatLngs(frame.tail || []);
    d.item.querySelector('.state').textContent = frame.motion || '–';
    d.item.dataset.state = frame.motion || '';
    if (followed === d.id) map.panTo(at, { animate: false });
  }

  /// The heading: a 14-pixel stroke the way the device is going (redrawn on zoom).
  function pointHeading(d) {
    const frame = d.frame, at = L.latLng(frame.latitude, frame.longitude);
    if (frame.headingDeg == null || (frame.speedMps || 0) < 0.5) { d.heading.setLatLngs([at, at]); return; }
    const r = frame.headingDeg * Math.PI / 180, p = map.latLngToLayerPoint(at);
    d.heading.setLatLngs([at, map.layerPointToLatLng(L.point(p.x + 14 * Math.sin(r), p.y - 14 * Math.cos(r)))]);
  }
  map.on('zoomend', () => { for (const d of devices.values()) if (d.frame && d.heading) pointHeading(d); });

  function applyPending(now) {
    stats.ticks += 1;
    if (stats.lastTick) stats.tickMs.push(now - stats.lastTick);
    stats.lastTick = now;
    if (stats.tickMs.length > 20000) stats.tickMs.splice(0, 10000);
    if (pending.size > 0) {
      const started = performance.now();
      const arrived = Date.now();
      for (const [id, { frame, arrivedMs }] of pending) {
        const d = device(id);
        d.frame = frame;
        d.arrivedMs = arrivedMs == null ? arrived : arrivedMs;
        draw(d, frame);
        showAge(d, arrived);
      }
      stats.updates += pending.size;
      pending.clear();
      stats.frames += 1;
      stats.applyMs.push(performance.now() - started);
      if (stats.applyMs.length > 5000) stats.applyMs.splice(0, stats.applyMs.length - 5000);
      mapElement.dataset.devices = String(devices.size);
      if (!fitted && devices.size > 0) {
        fitted = true;
        map.fitBounds(L.latLngBounds([...devices.values()].filter(d => d.frame).map(d => [d.frame.latitude, d.frame.longitude])).pad(0.3),
                      { maxZoom: 15 });
      }
    }
    requestAnimationFrame(applyPending);
  }
  requestAnimationFrame(applyPending);

  // Ages in the list, once a second: how long since the device's last frame
  // came. A frame whose fix is more than an hour older than its arrival is a
  // replayed (or long-delayed) fix: the list says so, with the fix's own time,
  // instead of an age in thousands of hours.
  function showAge(d, now) {
    const seconds = Math.max(0, Math.round((now - d.arrivedMs) / 1000));
    const utc = ms => `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
    // A frame from the track service (a page opened later) came when its fix did, days ago perhaps: the date then.
    let text = seconds < 120 ? `${seconds} s` : seconds < 7200 ? `${Math.round(seconds / 60)} min`
      : seconds < 172800 ? `${Math.round(seconds / 3600)} h` : `since ${utc(d.arrivedMs)}`;
    if (d.arrivedMs - d.frame.timeMs > 3600 * 1000) {
      text += ` · replay of ${utc(d.frame.timeMs)}`;
    }
    d.item.querySelector('.age').textContent = text;
    d.item.dataset.replay = d.arrivedMs - d.frame.timeMs > 3600 * 1000 ? 'true' : 'false';
  }
  setInterval(() => {
    const now = Date.now();
    for (const d of devices.values()) if (d.frame) showAge(d, now);
  }, 1000);

  function noteEvent(event) {
    const d = device(event.device);
    d.lastEvent = event;
    const detail = event.crossing ? `${event.type} ${event.crossing.geofenceID}`
      : event.type === 'motionChange' ? `motion ${event.state}` : event.type;
    d.item.querySelector('.last').textContent = detail;
    // The followed device's day changes shape: build its track again (once things settle).
    if (event.device === followed && ['trackingGap', 'stopEnded', 'tripEnded', 'motionChange', 'sessionStarted'].includes(event.type)) {
      clearTimeout(refresh);
      refresh = setTimeout(() => { const picker = document.getElementById('session'); if (picker.value) showTrack(followed, picker.value); }, 1500);
    }
    if (event.type === 'location' || event.type === 'locationRejected') return;
    const line = document.createElement('li');
    line.textContent = `${TrackerTrack.time(event.timeMs)} ${event.device} ${detail}`;
    eventLog.prepend(line);
    while (eventLog.children.length > 50) eventLog.lastChild.remove();
  }

  // MQTT: the broker that served this page, over WebSockets.
  if (!settings.user || !settings.password) {
    say('add #user=…&password=… (the map account) to the address');
    return;
  }
  const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host;
  const clientId = settings.user;  // the broker names the connection after its account anyway
  // Only this account may read its area (config/acl); the random part keeps
  // any device from aiming an answer at this page's requests.
  const pageKey = Array.from(crypto.getRandomValues(new Uint8Array(12)), b => b.toString(16).padStart(2, '0')).join('');
  const replyTopic = `${settings.prefix}/_map/${clientId}/${pageKey}/reply`;
  const client = mqttlib.default.connect(url, {
    protocolVersion: 5, username: settings.user, password: settings.password, clientId, clean: true, reconnectPeriod: 3000,
  });
  const waiting = new Map();
  let nextRequest = 1;

  client.on('connect', () => {
    say('connected');
    client.subscribe([`${settings.prefix}/+/live`, `${settings.prefix}/+/events`, replyTopic], { qos: 0 }, () => {
      document.body.dataset.connected = 'true';
      loadFleet();
    });
  });
  client.on('close', () => say('disconnected; trying again'));
  client.on('error', error => say(`error: ${error.message}`));
  client.on('message', (topic, payload) => {
    let body;
    try { body = JSON.parse(payload.toString()); } catch (e) { return; }
    const leaf = topic.slice(topic.lastIndexOf('/') + 1);
    if (topic === replyTopic) {
      const done = waiting.get(body.id);
      if (done) { waiting.delete(body.id); done(body); }
    } else if (leaf === 'live' && body.device) {
      pending.set(body.device, { frame: body, arrivedMs: null });
    } else if (leaf === 'events' && body.device) {
      noteEvent(body);
    }
  });

  /// A read-only query to a device's services, answered on the page's reply topic.
  function ask(deviceID, name, args) {
    const id = `map-${nextRequest++}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { waiting.delete(id); reject(new Error(`${name}: no reply`)); }, 30000);
      waiting.set(id, reply => {
        clearTimeout(timer);
        reply.ok ? resolve(reply.result) : reject(new Error(`${name}: ${reply.code} ${reply.message}`));
      });
      client.publish(`${settings.prefix}/${deviceID}/cmd/${name}`, JSON.stringify({ id, args }),
                     { qos: 1, properties: { responseTopic: replyTopic } }, error => {
        // The broker refused it (its ACL: this account may not ask that): no reply will come.
        if (error && waiting.delete(id)) { clearTimeout(timer); reject(new Error(`${name}: refused by the broker (${error.message})`)); }
      });
    });
  }

  /// Every device's latest frame, from the track service: a fleet whose
  /// frames are not retained (retainLiveFrames off) shows its parked vans too.
  /// A frame that came on the topic meanwhile is newer and stays. Asked
  /// again in 30 s should the track service not answer.
  let fleetRetry = null;
  async function loadFleet() {
    clearTimeout(fleetRetry);
    let after = null;
    try {
      do {
        const page = await ask('_fleet', 'getLive', after ? { after } : {});
        for (const frame of page.frames || []) {
          const known = pending.has(frame.device) ? pending.get(frame.device).frame : (devices.get(frame.device) || {}).frame;
          if (known && known.timeMs >= frame.timeMs) continue;
          // Its age counts from its fix, not from this page's question.
          pending.set(frame.device, { frame, arrivedMs: Math.min(Date.now(), frame.timeMs) });
        }
        after = page.next;
      } while (after);
      document.body.dataset.fleetLoaded = 'true';
    } catch (e) {
      say(`the fleet's live frames: ${e.message}; asking again in 30 s`);
      fleetRetry = setTimeout(loadFleet, 30000);
    }
  }

  async function follow(id) {
    followed = id;
    for (const d of devices.values()) d.item.classList.toggle('followed', d.id === id);
    const d = devices.get(id);
    if (d && d.frame) map.setView([d.frame.latitude, d.frame.longitude], Math.max(map.getZoom(), 14));
    const session = d && d.frame && d.frame.session ? d.frame.session.id : null;
    await loadSessions(id, session);
  }

  async function loadSessions(id, current) {
    const picker = document.getElementById('session');
    picker.innerHTML = '';
    try {
      const sessions = await ask(id, 'getSessions', { fromMs: Date.now() - 30 * 86400000, toMs: Date.now() + 86400000 });
      for (const s of (sessions || []).slice().reverse()) {
        const option = document.createElement('option');
        option.value = s.id;
        option.textContent = `${new Date(s.startMs).toISOString().slice(0, 16).replace('T', ' ')} ${s.tag || ''}`;
        picker.appendChild(option);
      }
    } catch (e) { /* an old session list is not worth an error: the live session still shows */ }
    if (current && ![...picker.options].some(o => o.value === current)) {
      const option = document.createElement('option');
      option.value = current; option.textContent = 'live session';
      picker.prepend(option);
    }
    if (current) picker.value = current;
    picker.onchange = () => showTrack(id, picker.value);
    if (picker.value) await showTrack(id, picker.value);
  }

  async function showTrack(id, sessionID) {
    say(`building the track of ${id}…`);
    try {
      const [track, fences, crossings] = await Promise.all([
        ask(id, 'buildTrack', { sessionID }),
        ask(id, 'getGeofences', {}).catch(() => []),
        ask(id, 'getGeofenceEvents', { limit: 1000 }).catch(() => []),
      ]);
      trackLayer = TrackerTrack.showDay(map, track, fences, crossings, document.getElementById('legend'), trackLayer);
      say(`${id}: track of session ${sessionID.slice(0, 8)}`);
    } catch (e) {
      say(e.message);
    }
  }

  if (settings.device) {
    // Opened for one device (#device=…): follow it as soon as its frame comes.
    const wanted = settings.device;
    const started = setInterval(() => {
      const d = devices.get(wanted);
      if (d && d.frame) { clearInterval(started); follow(wanted); }
    }, 200);
  }
})();
