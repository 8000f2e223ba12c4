// Draws a built Track (the track service's buildTrack result) on a Leaflet
// map: moving segments coloured by speed band, stops sized by duration with
// arrival and departure, gaps dashed grey, arrows, start and end, and fences
// with their visits. Shared by the live page and `trackerctl view` files.
(function (global) {
  'use strict';

  const BAND_COLOURS = { walk: '#2a9d8f', slow: '#457b9d', medium: '#f4a261', fast: '#e63946' };
  const BAND_LIMITS = { walk: '< 2.5 m/s', slow: '2.5–8 m/s', medium: '8–17 m/s', fast: '≥ 17 m/s' };

  function time(ms) {
    return new Date(ms).toISOString().slice(11, 19) + ' UTC';
  }

  function duration(seconds) {
    const minutes = Math.round(seconds / 60);
    return minutes >= 60 ? `${Math.floor(minutes / 60)} h ${minutes % 60} min` : `${minutes} min`;
  }

  function arrowIcon(bearing) {
    return L.divIcon({
      className: 'track-arrow',
      html: `<div style="transform: rotate(${bearing}deg)">▲</div>`,
      iconSize: [14, 14],
      iconAnchor: [7, 7],
    });
  }

  function endIcon(label, cls) {
    return L.divIcon({ className: `track-end ${cls}`, html: label, iconSize: [20, 20], iconAnchor: [10, 10] });
  }

  /// Returns a layer group with the track and the fences; counts for tests
  /// and the legend in `group.trackCounts`.
  function trackLayer(track, fences, crossings) {
    const group = L.featureGroup();
    const counts = { moving: 0, stop: 0, gap: 0, arrows: 0, fences: 0 };
    for (const segment of track.segments) {
      const line = segment.vertices.map(v => [v.latitude, v.longitude]);
      if (segment.kind === 'moving') {
        counts.moving += 1;
        const colour = BAND_COLOURS[segment.speedBand] || BAND_COLOURS.slow;
        L.polyline(line, { color: colour, weight: 5, opacity: 0.9, className: 'track-moving' })
          .bindTooltip(`${segment.speedBand || 'moving'}: ${(segment.distanceM / 1000).toFixed(2)} km, ` +
                       `${time(segment.startMs)}–${time(segment.endMs)}, average ${(segment.averageSpeedMps || 0).toFixed(1)} m/s`)
          .addTo(group);
        for (const arrow of segment.arrows || []) {
          counts.arrows += 1;
          L.marker([arrow.latitude, arrow.longitude], { icon: arrowIcon(arrow.bearingDeg), interactive: false }).addTo(group);
        }
      } else if (segment.kind === 'stop' && segment.stop) {
        counts.stop += 1;
        const stop = segment.stop;
        // Area grows with the time stood: a 10-minute stop is twice as wide as a 2.5-minute one.
        const radius = Math.max(6, Math.min(30, 3 * Math.sqrt(stop.durationSec / 15)));
        L.circleMarker([stop.latitude, stop.longitude], {
          radius, color: '#6a4c93', weight: 2, fillColor: '#6a4c93', fillOpacity: 0.35, className: 'track-stop',
        }).bindTooltip(`stop ${duration(stop.durationSec)}: arrived ${time(stop.arrivalMs)}, left ${time(stop.departureMs)}`,
                       { permanent: stop.durationSec >= 300, direction: 'bottom', offset: [0, radius] })
          .addTo(group);
      } else if (segment.kind === 'gap') {
        counts.gap += 1;
        L.polyline(line, { color: '#888', weight: 3, dashArray: '8 8', className: 'track-gap' })
          .bindTooltip(`dark ${duration((segment.endMs - segment.startMs) / 1000)}, ` +
                       `${Math.round(segment.gapDistanceM || 0)} m in a straight line`)
          .addTo(group);
      }
    }
    const drawn = track.segments.filter(s => s.kind !== 'gap' && s.vertices.length > 0);
    if (drawn.length > 0) {
      const first = drawn[0].vertices[0];
      const lastSegment = drawn[drawn.length - 1];
      const last = lastSegment.vertices[lastSegment.vertices.length - 1];
      L.marker([first.latitude, first.longitude], { icon: endIcon('S', 'track-start') }).bindTooltip(`start ${time(first.timeMs)}`).addTo(group);
      L.marker([last.latitude, last.longitude], { icon: endIcon('E', 'track-finish') }).bindTooltip(`end ${time(last.timeMs)}`).addTo(group);
    }
    for (const fence of fences || []) {
      counts.fences += 1;
      const visits = (crossings || []).filter(c => c.geofenceID === fence.id && c.kind === 'enter').length;
      L.circle([fence.latitude, fence.longitude], {
        radius: fence.radiusM, color: '#e9c46a', weight: 2, fillOpacity: 0.12, dashArray: '4 4', className: 'track-fence',
      }).bindTooltip(`${fence.id}: ${visits} visit${visits === 1 ? '' : 's'}`, { permanent: true, direction: 'top', offset: [0, -10], className: 'fence-label' })
        .addTo(group);
    }
    group.trackCounts = counts;
    return group;
  }

  function legend(track) {
    const s = track.statistics;
    const bands = Object.keys(BAND_COLOURS)
      .map(b => `<span><i style="background:${BAND_COLOURS[b]}"></i>${b} ${BAND_LIMITS[b]}</span>`).join('');
    return `<div class="legend-bands">${bands}<span><i class="gap"></i>dark</span></div>` +
      `<div>${(s.observedDistanceM / 1000).toFixed(1)} km observed · moving ${duration(s.movingSec)} · ` +
      `${s.stops} stop${s.stops === 1 ? '' : 's'} (${duration(s.stoppedSec)}) · ${s.gaps} gap${s.gaps === 1 ? '' : 's'} · ` +
      `top ${(s.maxSpeedMps * 3.6).toFixed(0)} km/h</div>`;
  }

  /// Draws a day on `map` (replacing `previous`), fits the map to it, writes
  /// its legend, and leaves its counts on the map's element for tests.
  function showDay(map, track, fences, crossings, legendElement, previous) {
    if (previous) previous.remove();
    const layer = trackLayer(track, fences, crossings).addTo(map);
    if (layer.getBounds().isValid()) map.fitBounds(layer.getBounds().pad(0.1));
    legendElement.innerHTML = `<b>${track.device}</b> ` + legend(track);
    const counts = layer.trackCounts;
    Object.assign(map.getContainer().dataset, {
      trackDevice: track.device, trackMoving: counts.moving, trackStops: counts.stop, trackGaps: counts.gap });
    return layer;
  }

  global.TrackerTrack = { trackLayer, legend, showDay, BAND_COLOURS, time, duration };
})(window);
