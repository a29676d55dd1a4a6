"""Serve the web sample on localhost: the page, LiteRT.js from this folder's node_modules, and a model.

    npm ci --prefix samples/web          # once: LiteRT.js (@litertjs/core) into samples/web/node_modules
    python samples/web/serve.py          # then open http://localhost:8000 (or the phone: http://<this host>:8000)
    python samples/web/serve.py --model m.tflite --labels labels.json --examples images/ --port 8080

Routes: / (this folder), /vendor/ (node_modules, so the WASM runtime is never fetched from a CDN),
/model/model.tflite, /model/labels.json, /model/images/<file>, and /config.json telling the page what to load.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import mimetypes
import os
import posixpath
import sys
import threading
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = os.path.join(os.path.dirname(HERE), "shapes")
VENDOR = os.path.join(HERE, "node_modules")
mimetypes.add_type("application/wasm", ".wasm")
mimetypes.add_type("text/javascript", ".js")


class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, model: str, labels: str, examples: str | None, **kwargs):
        self.model_path, self.labels_path, self.examples_dir = model, labels, examples
        super().__init__(*args, directory=HERE, **kwargs)

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if os.environ.get("SAMPLE_SERVER_LOG"):
            super().log_message(format, *args)

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def _examples(self) -> list[str]:
        if not self.examples_dir or not os.path.isdir(self.examples_dir):
            return []
        return [f"/model/images/{n}" for n in sorted(os.listdir(self.examples_dir))
                if n.lower().endswith((".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif"))]

    def translate_path(self, path: str) -> str:
        path = posixpath.normpath(urllib.parse.unquote(urllib.parse.urlsplit(path).path))
        if path.startswith("/vendor/"):
            return os.path.join(VENDOR, *path[len("/vendor/"):].split("/"))
        if path == "/model/model.tflite":
            return self.model_path
        if path == "/model/labels.json":
            return self.labels_path
        if path.startswith("/model/images/") and self.examples_dir:
            return os.path.join(self.examples_dir, os.path.basename(path))
        if path.startswith("/model/"):
            return os.path.join(HERE, "missing")
        return super().translate_path(path)

    def do_GET(self):
        if urllib.parse.urlsplit(self.path).path == "/config.json":
            body = json.dumps({"model": "/model/model.tflite", "labels": "/model/labels.json",
                               "name": os.path.basename(self.model_path), "examples": self._examples()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def make_server(host: str = "127.0.0.1", port: int = 0, model: str | None = None, labels: str | None = None,
                examples: str | None = None) -> http.server.ThreadingHTTPServer:
    """A server for the sample (port 0: any free port; `server.server_address` says which)."""
    if not os.path.isdir(os.path.join(VENDOR, "@litertjs", "core")):
        raise SystemExit(f"LiteRT.js is not installed in {VENDOR}: run `npm ci --prefix {HERE}` first")
    handler = functools.partial(Handler, model=os.path.abspath(model or os.path.join(SHAPES, "shapes_cnn.tflite")),
                                labels=os.path.abspath(labels or os.path.join(SHAPES, "labels.json")),
                                examples=os.path.abspath(examples or os.path.join(SHAPES, "images")))
    return http.server.ThreadingHTTPServer((host, port), handler)


def serve_in_background(**kwargs) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = make_server(**kwargs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to reach it from a phone on the network")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", help="a .tflite with one NHWC float image input (default: the shapes model)")
    parser.add_argument("--labels", help="JSON list of class names")
    parser.add_argument("--examples", help="a folder of example images")
    args = parser.parse_args()
    server = make_server(args.host, args.port, args.model, args.labels, args.examples)
    print(f"serving the sample at http://{args.host}:{server.server_address[1]} (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
