// Model Explorer's web app in one file, without its server: this script runs before the app and answers the
// requests the app makes (its API, its static files, its worker) from the data embedded in the page, so that
// the page works opened from disk (file://) or from any static host, and asks nothing of the network.
//
// The embedded data (the JSON of the element #litert-torch-view) holds:
//   query       the ?data=... parameter that tells the app which graphs and node data to load
//   extensions  the answer to /api/v1/get_extensions (the JSON loader the graphs:// source needs)
//   graphs      the answers to /api/v1/load_graphs_json?graph_index=N
//   nodeData    the node-data JSON strings, answers to /api/v1/load_node_data?node_data_index=N
//   texts       static_files/*.json, by path
//   images      static_files/*.png, by path, as data: URLs (WebGL refuses textures from file:// images)
//   worker      the source of the app's layout worker (a worker cannot be started from a file:// URL)
(() => {
  const data = JSON.parse(document.getElementById('litert-torch-view').textContent);
  const page = location.pathname;

  // The app routes on the path under <base href>, and keeps its state in the query string.
  document.querySelector('base').setAttribute('href', page);
  for (const name of ['pushState', 'replaceState']) {
    const original = history[name].bind(history);
    // The router writes "<page>/?..." (base + "/"); a file: URL may not change its path.
    history[name] = (state, title, url) => original(state, title,
      typeof url === 'string' && url.startsWith(page + '/') ? page + url.slice(page.length + 1) : url);
  }
  if (!new URLSearchParams(location.search).has('data')) {
    history.replaceState(null, '', page + '?' + data.query);
  }

  const json = (value) => new Response(JSON.stringify(value), {headers: {'Content-Type': 'application/json'}});
  const endsWith = (path, key) => path === key || path.endsWith('/' + key);
  const originalFetch = window.fetch.bind(window);
  window.fetch = async (input, init) => {
    const url = new URL(typeof input === 'string' ? input : input.url, location.href);
    const path = url.pathname;
    const index = (name) => Number(url.searchParams.get(name));
    if (endsWith(path, 'api/v1/get_extensions')) return json(data.extensions);
    if (endsWith(path, 'api/v1/check_new_version')) {
      return json({version: '', runningVersion: '', releaseUrl: '', desktopAppUrl: ''});
    }
    if (endsWith(path, 'api/v1/load_graphs_json')) return json(data.graphs[index('graph_index')]);
    if (endsWith(path, 'api/v1/load_node_data')) return json({content: data.nodeData[index('node_data_index')]});
    for (const [key, text] of Object.entries(data.texts)) {
      if (endsWith(path, key)) return new Response(text, {headers: {'Content-Type': 'application/json'}});
    }
    if (url.protocol === 'data:' || url.protocol === 'blob:') return originalFetch(input, init);
    return new Response('not in this page', {status: 404});
  };

  const imageSrc = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, 'src');
  Object.defineProperty(HTMLImageElement.prototype, 'src', {
    configurable: true,
    enumerable: imageSrc.enumerable,
    get() { return imageSrc.get.call(this); },
    set(value) {
      const key = Object.keys(data.images).find((k) => endsWith(String(value).split('?')[0], k));
      imageSrc.set.call(this, key === undefined ? value : data.images[key]);
    },
  });

  const OriginalWorker = window.Worker;
  const workerUrl = URL.createObjectURL(new Blob([data.worker], {type: 'text/javascript'}));
  window.Worker = class extends OriginalWorker {
    constructor(url, options) {
      super(String(url).endsWith(data.workerName) ? workerUrl : url, options);
    }
  };

  // The server's push channel (page refreshes when a served model file changes): nothing to listen to here.
  window.EventSource = class {
    constructor() { this.readyState = 2; }
    addEventListener() {}
    removeEventListener() {}
    close() {}
  };
})();
