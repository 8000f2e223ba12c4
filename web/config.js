// The operator's choices for the map page. Tiles: none by default, so the
// page fetches nothing from a third party unless you choose a server, e.g.
//   tiles: 'https://tile.example.org/{z}/{x}/{y}.png', attribution: '© …'
// (any URL given as #tiles=… in the page's address wins).
window.TRACKER_MAP = { prefix: 'tracker', tiles: null, attribution: '' };
