"""What the viewer shows, and the two ways of showing it: Model Explorer's web app as our local server serves it,
and the same app in one self-contained HTML file that needs no server (`export`).

`prepare` makes a `ViewData`: the model's graphs from Model Explorer's TFLite adapter and our overlays, checked
to land on every op. The web app loads both from the `?data=` parameter of its URL, as Model Explorer's own
server directs it: `{"models": [{"url": "graphs://<name>/0"}], "nodeData": ["node_data://<overlay>/<i>", ...]}`
makes it fetch /api/v1/load_graphs_json?graph_index=0 and /api/v1/load_node_data?node_data_index=<i>.

The shared folder `export` writes holds the page, the .tflite file and one node-data JSON file per overlay (the
files any Model Explorer loads: `model-explorer model.tflite --node_data_paths=...`, or "Add per-node data" in
its page), and a README.txt saying how to open them.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Iterable

from litert_torch.errors import InvalidArgumentError
from litert_torch.explorer.graph import ViewError, adapter_graphs, check_overlays, version, web_app_folder
from litert_torch.explorer.overlays import Overlay, overlays, safe_stem
from litert_torch.files import atomic_folder, write_atomic
from litert_torch.flatbuffer.reader import read_model

# The only adapter the served graphs need: the web app reads graphs:// sources with its JSON loader.
EXTENSIONS = [{"fileExts": ["json"], "type": "adapter", "id": "builtin_json", "name": "JSON adapter",
               "description": "Graphs JSON made by Model Explorer's TFLite adapter."}]
NO_NEW_VERSION = {"version": "", "runningVersion": "", "releaseUrl": "", "desktopAppUrl": ""}


@dataclass
class ViewData:
    """A model ready for the viewer: its name, Model Explorer's graphs of it, our overlays, and its bytes."""

    name: str
    graphs: dict[str, Any]
    overlays: list[Overlay]
    data: bytes = field(repr=False, default=b"")

    def url_data(self) -> dict[str, Any]:
        return {"models": [{"url": f"graphs://{self.name}/0", "adapterId": "builtin_json"}],
                "nodeData": [f"node_data://{o.name}/{i}" for i, o in enumerate(self.overlays)],
                "nodeDataTargets": ["" for _ in self.overlays]}

    def query(self) -> str:
        """The URL query (without "?") that makes the web app load the graphs and every overlay."""
        return "data=" + urllib.parse.quote(json.dumps(self.url_data()))

    def node_data(self, index: int) -> str:
        return json.dumps(self.overlays[index].to_json(), allow_nan=False)


def prepare(data: bytes, *, layers: Iterable[Any] | None = None, name: str | None = None,
            path: str | None = None) -> ViewData:
    """The model in `data` (read from `path` by the adapter when a file holds it) for the viewer, with the
    per-layer errors of a validation when `layers` is given."""
    model = read_model(data)
    found = overlays(data, model.metadata, layers, model=model)
    graphs = adapter_graphs(data, path)
    check_overlays(graphs, model, data, found)
    label = (name or (os.path.basename(path) if path else "model.tflite")).replace("/", "_")
    return ViewData(label, graphs, found, data)


def _remote_fonts_removed(html: str) -> str:
    """index.html without the links to web fonts on other hosts: the same fonts are in the app's
    static_files/, which its stylesheet loads, so the page asks nothing of the network."""
    html = re.sub(r"<link[^>]*href=\"https?://[^>]*>", "", html)

    def without_remote(style: re.Match) -> str:
        rules = re.sub(r"@font-face\{[^}]*https?://[^}]*\}", "", style.group(1))
        return f"<style>{rules}</style>" if rules.strip() else ""

    return re.sub(r"<style>(.*?)</style>", without_remote, html, flags=re.S)


def served_index() -> str:
    """The web app's index.html as our server serves it."""
    return _remote_fonts_removed(_read_text(os.path.join(web_app_folder(), "index.html")))


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _data_url(path: str, mime: str) -> str:
    with open(path, "rb") as f:
        return f"data:{mime};base64,{base64.b64encode(f.read()).decode('ascii')}"


def _need(match: re.Match | None, what: str) -> re.Match:
    if match is None:
        raise ViewError(f"Model Explorer {version()}'s web app has no {what} where this page expects one; the "
                        "self-contained page is made for the versions named in litert_torch/explorer/graph.py")
    return match


def standalone_page(view: ViewData) -> str:
    """One HTML file holding Model Explorer's web app, its assets, the graphs and the overlays, which works
    opened from disk (see standalone.js for how its requests are answered)."""
    web = web_app_folder()
    static = os.path.join(web, "static_files")
    html = served_index()

    def local_assets(text: str) -> str:  # url(/static_files/X) -> the file, inline
        def inline(m: re.Match) -> str:
            path = os.path.join(static, os.path.basename(m.group(1)))
            mime = "font/woff2" if path.endswith(".woff2") else "image/svg+xml" if path.endswith(".svg") else None
            return f"url({_data_url(path, mime)})" if mime and os.path.isfile(path) else "url()"
        return re.sub(r"url\(\"?/?static_files/([^)\"]+)\"?\)", inline, text)

    css = _need(re.search(r"<link rel=\"stylesheet\" href=\"([^\"]+\.css)\"[^>]*>", html), "stylesheet").group(1)
    stylesheet = local_assets(_read_text(os.path.join(web, css)))
    html = re.sub(r"<noscript>.*?</noscript>", "", html, flags=re.S)
    html = re.sub(r"<link rel=\"stylesheet\"[^>]*>", "", html)
    html = re.sub(r"<link rel=\"shortcut icon\"[^>]*>", "", html)
    html = local_assets(html)
    scripts = re.findall(r"<script src=\"([^\"]+\.js)\" type=\"module\"></script>", html)
    if not scripts:
        _need(None, "module scripts")
    main = next((s for s in scripts if s.startswith("main")), scripts[-1])
    worker = _need(re.search(r"new Worker\(new URL\(\"([^\"]+)\"", _read_text(os.path.join(web, main))),
                   "layout worker").group(1)
    embedded = {
        "query": view.query(),
        "extensions": EXTENSIONS,
        "graphs": [view.graphs],
        "nodeData": [view.node_data(i) for i in range(len(view.overlays))],
        "texts": {f"static_files/{n}": _read_text(os.path.join(static, n))
                  for n in sorted(os.listdir(static)) if n.endswith(".json")},
        "images": {f"static_files/{n}": _data_url(os.path.join(static, n), "image/png")
                   for n in sorted(os.listdir(static)) if n.endswith(".png")},
        "worker": _read_text(os.path.join(web, worker)),
        "workerName": worker,
    }
    prelude = _read_text(os.path.join(os.path.dirname(__file__), "standalone.js"))
    head = (f"<style>{stylesheet}</style>\n"
            f"<script type=\"application/json\" id=\"litert-torch-view\">{_json_text(embedded)}</script>\n"
            f"<script>{_script_text(prelude)}</script>\n")
    for name in scripts:
        inline = f"<script type=\"module\">{_script_text(_read_text(os.path.join(web, name)))}</script>"
        html = html.replace(f"<script src=\"{name}\" type=\"module\"></script>", inline, 1)
    return html.replace("</head>", head + "</head>", 1)


def _script_text(text: str) -> str:
    """JavaScript safe inside an inline <script> element. Only "</script" ends the element (and can appear in
    JavaScript only in a string, regular expression, template or comment, where "<\\/script" means the same);
    "<!--" followed by "<script" before any "-->" would keep a later "</script>" from ending it, which no
    source we inline does (refused rather than written broken)."""
    if re.search(r"<!--(?:(?!-->).)*<script", text, flags=re.S | re.I):
        raise ViewError("a Model Explorer script cannot be inlined in one page (it holds \"<!--\" then \"<script\")")
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.I)


def _json_text(value: Any) -> str:
    """JSON safe inside a <script> element: every "<" written as its \\u escape."""
    return json.dumps(value).replace("<", "\\u003c")


README = """This folder shows {model} in Google's Model Explorer, with the litert_torch overlays{validated}.

Open it one of these ways:

1. {page}: open it in a web browser (double-click it, or File > Open). It holds Model Explorer's web app, the
   graph and the overlays, and needs neither a server nor the network. Pick an overlay under "Node data
   providers" on the right (the eye icon shows it on the graph); the "Node data" table lists every op's value.

2. With Model Explorer installed (pip install ai-edge-model-explorer), in this folder:
       model-explorer {model} --node_data_paths={paths}
   or, in a Model Explorer page already open, load {model} and add each file of node_data/ with
   "Add per-node data".

Overlays (node_data/, Model Explorer's node-data JSON, keyed by graph id and node id):
{overlays}
"""


def export(view: ViewData, folder: str, *, overwrite: bool = False) -> str:
    """Write the shared folder (see the module docstring) at `folder`, atomically; returns the page's path."""
    stem = safe_stem(os.path.splitext(view.name)[0])
    page = standalone_page(view)
    with atomic_folder(folder, overwrite=overwrite) as tmp:
        write_atomic(os.path.join(tmp, f"{stem}.html"), page.encode("utf-8"))
        write_atomic(os.path.join(tmp, f"{stem}.tflite"), view.data)
        os.mkdir(os.path.join(tmp, "node_data"))
        paths = []
        for overlay in view.overlays:
            path = os.path.join("node_data", f"{overlay.stem}.json")
            content = json.dumps(overlay.to_json(), indent=1, allow_nan=False)
            write_atomic(os.path.join(tmp, path), content.encode("utf-8"))
            paths.append(path)
        validated = any(o.stem == "layer-error" for o in view.overlays)
        text = README.format(model=f"{stem}.tflite", page=f"{stem}.html", paths=",".join(paths),
                             validated=" and the per-layer errors of a validation" if validated else "",
                             overlays="\n".join(f"  {p}: {o.name}" for p, o in zip(paths, view.overlays)))
        write_atomic(os.path.join(tmp, "README.txt"), text.encode("utf-8"))
    return os.path.join(folder, f"{stem}.html")


def check_folder(folder: str, overwrite: bool) -> None:
    """InvalidArgumentError before any work when `folder` cannot receive the export."""
    folder = os.path.abspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise InvalidArgumentError(f"{folder} exists and is not a folder")
    if os.path.isdir(folder) and os.listdir(folder) and not overwrite:
        raise InvalidArgumentError(f"{folder} exists and is not empty; choose a new folder, or replace it with "
                                   "overwrite=True (--force)")
    parent = os.path.dirname(folder)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise InvalidArgumentError(f"cannot write {folder}: {parent} is not a writable folder")
