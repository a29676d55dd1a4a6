"""A local server for Model Explorer's web app showing one model: a `ModelView` handle, serving in a background
thread until `stop()`.

It answers the requests the web app makes when Model Explorer's own server has loaded graphs and node data for
it -- the app's files, /api/v1/get_extensions, /api/v1/check_new_version, /api/v1/load_graphs_json and
/api/v1/load_node_data -- from the `ViewData` made up front, and nothing else: no file reads by path, no
uploads, no version check against the network (Model Explorer's server does each of these; this one serves one
prepared model, binds 127.0.0.1 unless told otherwise, and can be stopped).
"""

from __future__ import annotations

import errno
import json
import mimetypes
import os
import sys
import threading
import urllib.parse
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from litert_torch.errors import InvalidArgumentError
from litert_torch.explorer.graph import web_app_folder
from litert_torch.explorer.page import EXTENSIONS, NO_NEW_VERSION, ViewData, served_index

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORTS = range(8080, 8100)  # Model Explorer's own default range; then any free port
_TYPES = {".js": "text/javascript", ".css": "text/css", ".json": "application/json", ".png": "image/png",
          ".svg": "image/svg+xml", ".woff2": "font/woff2", ".html": "text/html; charset=utf-8"}


class ModelView:
    """A running view: `url` to open; `stop()` ends it (also on leaving a `with` block); `wait()` blocks until
    it is stopped or interrupted (Ctrl-C). `report` is the validation whose errors it shows, when one ran."""

    report: Any = None

    def __init__(self, server: ThreadingHTTPServer, view: ViewData):
        self._server = server
        self.view = view
        host, self.port = server.server_address[:2]
        self.host = host.decode() if isinstance(host, bytes) else host
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{shown}:{self.port}/?{view.query()}"
        self._thread = threading.Thread(target=server.serve_forever, name="litert-torch-view", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def wait(self) -> None:
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def __enter__(self) -> "ModelView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"ModelView({self.view.name!r} at http://{self.host}:{self.port}/, {state})"


def _handler(view: ViewData) -> type[BaseHTTPRequestHandler]:
    web = web_app_folder()
    files = {}
    for folder, _, names in os.walk(web):
        for name in names:
            path = os.path.join(folder, name)
            files["/" + os.path.relpath(path, web).replace(os.sep, "/")] = path
    index = served_index().encode("utf-8")
    graphs = json.dumps(view.graphs).encode("utf-8")
    api = {
        "/api/v1/get_extensions": json.dumps(EXTENSIONS).encode("utf-8"),
        "/api/v1/check_new_version": json.dumps(NO_NEW_VERSION).encode("utf-8"),
    }

    class Handler(BaseHTTPRequestHandler):
        server_version = "litert-torch-view"

        def log_message(self, *args: Any) -> None:  # the CLI prints the URL; requests are not news
            pass

        def _send(self, body: bytes, content_type: str = "application/json", status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            path = url.path
            if path in ("/", "/index.html"):
                if "data" not in query:  # the bare address opens the model too
                    self.send_response(302)
                    self.send_header("Location", f"/?{view.query()}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return self._send(index, "text/html; charset=utf-8")
            if path in api:
                return self._send(api[path])
            if path == "/api/v1/load_graphs_json":
                return self._send(graphs) if query.get("graph_index") == ["0"] else self._not_found()
            if path == "/api/v1/load_node_data":
                number = (query.get("node_data_index") or [""])[0]
                if not number.isdigit() or int(number) >= len(view.overlays):
                    return self._not_found()
                return self._send(json.dumps({"content": view.node_data(int(number))}).encode("utf-8"))
            if path == "/apistream/server_director":  # the push channel for model files that change: none here
                return self._send(b"", "text/event-stream", 204)
            found = files.get(path)
            if found is None:
                return self._not_found()
            with open(found, "rb") as f:
                body = f.read()
            ext = os.path.splitext(found)[1]
            self._send(body, _TYPES.get(ext) or mimetypes.guess_type(found)[0] or "application/octet-stream")

        def _not_found(self) -> None:
            self._send(b"not found", "text/plain", 404)

    return Handler


def check_address(host: Any, port: Any) -> None:
    """InvalidArgumentError for a host or port `serve` cannot take (checked before any work)."""
    if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535):
        raise InvalidArgumentError(f"port must be an int from 0 to 65535 (0: any free port), got {port!r}")
    if not isinstance(host, str) or not host:
        raise InvalidArgumentError(f"host must be a host name or address, got {host!r}")


def serve(view: ViewData, *, host: str = DEFAULT_HOST, port: int | None = None,
          open_browser: bool = False) -> ModelView:
    """Serve `view` on `host`:`port` (None: the first free port of 8080-8099, else any free one; 0: any free
    one) and return the running ModelView; with `open_browser`, open its URL in the default browser."""
    check_address(host, port)
    handler = _handler(view)
    server = None
    for candidate in ([port] if port is not None else [*DEFAULT_PORTS, 0]):
        try:
            server = _Server((host, candidate), handler)
            break
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE and port is None:
                continue
            what = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror or exc})"
            raise InvalidArgumentError(f"port {candidate} on {host} {what}; choose another port (0: any free "
                                       "one)") from None
    if server is None:  # every candidate port was in use
        raise InvalidArgumentError(f"no free port on {host}")
    model_view = ModelView(server, view)
    if open_browser:
        open_in_browser(model_view.url)
    return model_view


def open_in_browser(url: str) -> bool:
    """Open `url` in a graphical web browser where there is one (without a display, Python's webbrowser would
    start a text browser in the terminal instead); whether one was asked to."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        import socket

        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        try:
            super().__init__(address, handler)
        except socket.gaierror as exc:
            raise InvalidArgumentError(f"host {address[0]!r} cannot be resolved: {exc}") from None
