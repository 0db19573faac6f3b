// plumb's live updates (Server-Sent Events from /events).
//
// One tab per browser holds the stream: a Web Lock elects it, and it shares
// what it receives with the dashboard's other tabs over a BroadcastChannel,
// so that open tabs do not use up the browser's few connections to the
// dashboard. When that tab closes, another takes the lock and the stream.
// A lost stream is reopened with an exponential backoff (1 s doubling to
// 30 s, with jitter). Rows are built with textContent: nothing the server
// sends is ever parsed as HTML, and a link is made only of an https URL
// that the server built.
(function () {
  'use strict';
  var body = document.body;
  var page = body.dataset.page;
  if (!page) { return; }
  if (body.dataset.live === 'off') {
    var off = document.getElementById('live-state');
    if (off) { off.textContent = 'off (plumb ui has no App informer you may watch)'; }
    return;
  }
  var rows = new Map();
  var liveState = '';
  var scope = null; // the namespaces the stream covers (null: every one)
  // The lock and channel are the viewer's own: two people's tabs in one
  // browser (behind a proxy) never share a stream.
  var name = 'plumb-live-' + (body.dataset.viewer || 'local');
  var channel = ('BroadcastChannel' in window) ? new BroadcastChannel(name) : null;
  var leader = false;

  function keyOf(r) { return r.namespace + '/' + r.name; }

  // rowID is a row's id: no namespace or name holds "_", so it is unique.
  function rowID(r) { return 'app-' + r.namespace + '_' + r.name; }

  function handle(m) {
    switch (m.type) {
      case 'snapshot':
        rows = new Map();
        scope = m.data.scope || null;
        (m.data.rows || []).forEach(function (r) { rows.set(keyOf(r), r); });
        break;
      case 'app':
        rows.set(keyOf(m.data), m.data);
        break;
      case 'delete':
        rows.delete(keyOf(m.data));
        break;
      case 'state':
        liveState = m.data;
        var el = document.getElementById('live-state');
        if (el) { el.textContent = m.data; }
        return;
      default:
        return;
    }
    // A page of a namespace the stream does not cover keeps what the
    // server rendered.
    if (scope && body.dataset.namespace && scope.indexOf(body.dataset.namespace) < 0) {
      var el = document.getElementById('live-state');
      if (el) { el.textContent = 'not live: the stream covers ' + scope.join(', '); }
      return;
    }
    if (page === 'apps') { renderApps(); } else if (page === 'app') { renderApp(); }
  }

  function broadcast(m) {
    handle(m);
    if (channel) { channel.postMessage(m); }
  }

  if (channel) {
    channel.onmessage = function (e) {
      var m = e.data;
      if (m.type === 'hello') {
        if (leader) {
          channel.postMessage({ type: 'snapshot', data: { scope: scope, rows: Array.from(rows.values()) } });
          channel.postMessage({ type: 'state', data: liveState });
        }
        return;
      }
      if (!leader) { handle(m); }
    };
  }

  function lead() {
    leader = true;
    var delay = 1000;
    function connect() {
      broadcast({ type: 'state', data: 'connecting…' });
      var source = new EventSource('/events');
      var opened = 0;
      source.addEventListener('open', function () {
        opened = Date.now();
        broadcast({ type: 'state', data: 'live' });
      });
      ['snapshot', 'app', 'delete'].forEach(function (type) {
        source.addEventListener(type, function (e) {
          var data;
          try { data = JSON.parse(e.data); } catch (err) { return; }
          broadcast({ type: type, data: data });
        });
      });
      source.onerror = function () {
        source.close();
        // A stream that lived a while ended normally (the server ends them
        // after some minutes): reconnect soon. One that failed at once, or
        // soon after it opened, backs off further each time.
        if (opened && Date.now() - opened > 30000) { delay = 1000; }
        var wait = delay * (0.5 + Math.random());
        delay = Math.min(delay * 2, 30000);
        broadcast({ type: 'state', data: 'offline: reconnecting in ' + Math.max(1, Math.round(wait / 1000)) + ' s' });
        setTimeout(connect, wait);
      };
    }
    connect();
    return new Promise(function () {}); // the lock is held until this tab closes
  }

  if (navigator.locks && channel) {
    navigator.locks.request(name, lead);
    channel.postMessage({ type: 'hello' });
  } else {
    lead();
  }

  // --- the Apps page ---

  // age is how long ago a time was, as the server writes ages (Kubernetes'
  // human durations: 45s, 3m20s, 25m, 4h10m, 30h, 3d4h, 20d, 2y).
  function age(at) {
    if (!at) { return '-'; }
    var s = Math.max(0, Math.floor((Date.now() - at) / 1000));
    var m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (s < 120) { return s + 's'; }
    if (m < 10) { return m + 'm' + (s % 60 ? (s % 60) + 's' : ''); }
    if (h < 3) { return m + 'm'; }
    if (h < 8) { return h + 'h' + (m % 60 ? (m % 60) + 'm' : ''); }
    if (h < 48) { return h + 'h'; }
    if (d < 8) { return d + 'd' + (h % 24 ? (h % 24) + 'h' : ''); }
    if (d < 730) { return d + 'd'; }
    return Math.floor(d / 365) + 'y';
  }

  // Ages move on between changes.
  setInterval(function () {
    document.querySelectorAll('[data-at]').forEach(function (el) {
      el.textContent = age(Number(el.dataset.at)) + (el.dataset.suffix || '');
    });
  }, 10000);

  function statusClass(s) { return (s === 'True' || s === 'False') ? s : 'Unknown'; }

  function cell(label, text, cls) {
    var td = document.createElement('td');
    td.dataset.label = label;
    td.textContent = text;
    if (cls) { td.className = cls; }
    return td;
  }

  function matches(r, namespace, status, query) {
    if (namespace && r.namespace !== namespace) { return false; }
    if (status === 'ready' && r.ready !== 'True') { return false; }
    if (status === 'failing' && !r.failingPhase) { return false; }
    if (status === 'drifted' && !r.drift) { return false; }
    if (status === 'suspended' && !r.suspended) { return false; }
    if (!query) { return true; }
    return (r.namespace + ' ' + r.name + ' ' + (r.message || '')).toLowerCase().indexOf(query.toLowerCase()) >= 0;
  }

  function rowOf(r, signature) {
    var tr = document.createElement('tr');
    tr.id = rowID(r);
    tr.appendChild(cell('Namespace', r.namespace));
    var name = cell('Name', '');
    var a = document.createElement('a');
    a.href = '/apps/' + encodeURIComponent(r.namespace) + '/' + encodeURIComponent(r.name);
    a.textContent = r.name;
    name.appendChild(a);
    if (r.suspended) {
      var tag = document.createElement('span');
      tag.className = 'tag';
      tag.textContent = 'suspended';
      name.appendChild(document.createTextNode(' '));
      name.appendChild(tag);
    }
    tr.appendChild(name);
    tr.appendChild(cell('Ready', r.ready, statusClass(r.ready)));
    tr.appendChild(cell('Healthy', r.healthy, statusClass(r.healthy)));
    var revision = cell('Revision', '');
    if (r.revisionURL && r.revisionURL.indexOf('https://') === 0) {
      var link = document.createElement('a');
      link.href = r.revisionURL;
      link.textContent = r.revision;
      revision.appendChild(link);
    } else {
      revision.textContent = r.revision;
    }
    tr.appendChild(revision);
    var tick = cell('Last tick', r.lastTickAt ? age(r.lastTickAt) : r.lastTick);
    if (r.lastTickAt) { tick.dataset.at = String(r.lastTickAt); }
    tr.appendChild(tick);
    tr.appendChild(cell('Failing phase', r.failingPhase || ''));
    tr.appendChild(cell('Drift', String(r.drift) + (r.driftBy ? ' by ' + r.driftBy : ''), 'drift'));
    tr.appendChild(cell('Destination', r.destination || ''));
    tr.appendChild(cell('Shard', r.shard || ''));
    tr.appendChild(cell('Message', r.message || '', 'message'));
    tr.dataset.signature = signature;
    return tr;
  }

  function renderApps() {
    var tbody = document.querySelector('#apps tbody');
    if (!tbody) { return; }
    var namespace = body.dataset.namespace || '';
    var status = body.dataset.status || 'all';
    var query = body.dataset.query || '';
    var shown = Array.from(rows.values()).filter(function (r) { return matches(r, namespace, status, query); });
    shown.sort(function (a, b) { return keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : 0; });
    var counts = { apps: 0, ready: 0, failing: 0, drifted: 0 };
    var existing = new Map();
    Array.from(tbody.children).forEach(function (tr) { if (tr.id) { existing.set(tr.id, tr); } });
    var wanted = shown.map(function (r) {
      counts.apps++;
      if (r.ready === 'True') { counts.ready++; }
      if (r.failingPhase) { counts.failing++; }
      if (r.drift) { counts.drifted++; }
      var signature = JSON.stringify(r);
      var old = existing.get(rowID(r));
      // An unchanged row keeps its node (and the focus, if it holds it).
      return (old && old.dataset.signature === signature) ? old : rowOf(r, signature);
    });
    if (wanted.length === 0) {
      var empty = document.createElement('tr');
      var td = document.createElement('td');
      td.colSpan = 10;
      td.textContent = 'No Apps' + (namespace ? ' in namespace ' + namespace : '') + '.';
      empty.appendChild(td);
      wanted.push(empty);
    }
    wanted.forEach(function (tr, i) {
      if (tbody.children[i] !== tr) { tbody.insertBefore(tr, tbody.children[i] || null); }
    });
    while (tbody.children.length > wanted.length) { tbody.removeChild(tbody.lastChild); }
    Object.keys(counts).forEach(function (k) {
      var el = document.getElementById('count-' + k);
      if (el) { el.textContent = String(counts[k]); }
    });
  }

  // --- the App page ---

  var first = null;

  // answers is syncrequest.Answers: handled is the request, or the one
  // that replaced it in the App's annotation (requested); never compared
  // as times, since the clocks that stamp them differ.
  function answers(handled, request, requested) {
    if (handled === request) { return true; }
    return !!requested && requested !== request && handled === requested;
  }

  function renderApp() {
    var r = rows.get(body.dataset.namespace + '/' + body.dataset.name);
    if (!r) { return; }
    var set = function (id, text, cls) {
      var el = document.getElementById(id);
      if (!el) { return; }
      el.textContent = text;
      if (cls) { el.className = cls; }
    };
    set('live-ready', r.ready, statusClass(r.ready));
    set('live-healthy', r.healthy, statusClass(r.healthy));
    set('live-last-tick', (r.lastTickAt ? age(r.lastTickAt) : r.lastTick) + ' ago');
    var lastTick = document.getElementById('live-last-tick');
    if (lastTick && r.lastTickAt) { lastTick.dataset.at = String(r.lastTickAt); lastTick.dataset.suffix = ' ago'; }
    var progress = document.getElementById('sync-progress');
    if (progress && progress.dataset.handled !== 'true' && answers(r.syncHandled, progress.dataset.request, r.syncRequested)) {
      progress.dataset.handled = 'true';
      set('sync-state', 'Sync handled: ' + r.syncOutcome, r.syncFailed ? 'False' : 'True');
    }
    var signature = [r.ready, r.healthy, r.revision, r.drift, r.failingPhase, r.suspended].join('|');
    if (first === null) { first = signature; return; }
    var changed = document.getElementById('app-changed');
    if (changed && signature !== first) { changed.hidden = false; }
  }
})();
