#!/usr/bin/python3
"""
Serve one folder's files, read-only, to the fleet's other hosts, with Range
requests (so aria2c on a peer can resume and fetch parts from several hosts).

Started by the controller as a transient systemd unit while a rollout fans
files out (``systemd-run --property=RuntimeMaxSec=...``), so a killed run's
server ends by itself. Serves only plain files directly in the folder, or with
``--nested`` in its subfolders too (a model store's
``<org>/<name>/<revision>/<path>``); a path with a component that starts with
a dot (partial files and folders, markers, locks) or that leads outside the
folder is never served. Standard library only, and runs as a script: no
imports from its package.

    python3 share.py --dir /opt/sglfleet/wheelhouse --port 30089
    python3 share.py --dir /opt/sglfleet/models --port 30090 --nested

**Example:**

.. code:: shell

    curl -r 0-99 http://node1:30089/torch-2.14.1-cp311-cp311-manylinux_2_34_x86_64.whl
"""

from __future__ import annotations

import argparse
import os
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

CHUNK = 1 << 20
RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def servable(folder: str, name: str, nested: bool = False) -> str | None:
    """
    The file under ``folder`` that the URL path ``name`` names, or None when it
    must not be served: empty, a component that starts with "." (".." among
    them), a subfolder without ``nested``, or a real path outside ``folder``
    (a symlink that leads out).
    """
    parts = name.split("/")
    if not name or any(not part or part.startswith(".") for part in parts) or (len(parts) > 1 and not nested):
        return None
    root = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, path]) != root or not os.path.isfile(path):
        return None
    return path


class Handler(BaseHTTPRequestHandler):
    folder = "."
    nested = False
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # the journal needs no line per piece
        pass

    def do_HEAD(self):
        self.answer(body=False)

    def do_GET(self):
        self.answer(body=True)

    def answer(self, body: bool) -> None:
        path = servable(self.folder, unquote(self.path.split("?", 1)[0].removeprefix("/")), self.nested)
        if path is None:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        size = os.path.getsize(path)
        start, end = 0, size - 1
        match = RANGE.match(self.headers.get("Range", ""))
        if match and (match.group(1) or match.group(2)):
            if match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            else:  # the last N bytes
                start = max(0, size - int(match.group(2)))
            if start > end:
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(HTTPStatus.PARTIAL_CONTENT)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(HTTPStatus.OK)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if not body:
            return
        with open(path, "rb") as handle:
            handle.seek(start)
            left = end - start + 1
            while left > 0:
                chunk = handle.read(min(CHUNK, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--dir", required=True, help="the folder to serve")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bind", default="", help="the address to listen on (default: all)")
    parser.add_argument("--nested", action="store_true", help="serve files in subfolders too")
    args = parser.parse_args(argv)
    Handler.folder, Handler.nested = args.dir, args.nested
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer((args.bind, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
