#!/usr/bin/env python3
"""The upstreams the egress tests reach: one HTTP and one HTTPS server on
loopback, each logging every request it gets (method, path, headers,
body) as a line of JSON, so a test can see exactly what left runbox.

    upstream.py --cert PEM --key PEM --log FILE --files DIR

Each server binds a port the kernel picks, so no other process can take it
between choosing and binding; once both listen it prints one line,
`listening HTTP_PORT HTTPS_PORT`.

Routes, on both:
    /echo          200, the request as JSON
    /redirect?to=U 302 to U
    /bytes?n=N     200, N bytes of "x"
    /slow?ms=N     200 after N ms
    /remember      200; keeps the request's headers
    /recall        200, the headers /remember kept, as JSON
    /land-on-it    302 to /landing?k=<the x-copy header /remember kept>
    /files/...     a file under DIR

It also puts a package index in DIR, at /files/simple/: one pure-Python
wheel, runbox-egress-probe 1.0, whose module says `VALUE = 42`; and at
/files/pyodide/ a mirror of Pyodide's packages whose one file, micropip's,
does not hash to what Pyodide's lock file says.
"""
import argparse
import base64
import hashlib
import io
import json
import os
import ssl
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

lock = threading.Lock()
remembered = {}


def handler(log_path, files_dir, scheme):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_any(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            seen = {
                "scheme": scheme,
                "method": self.command,
                "path": self.path,
                "headers": [[k, v] for k, v in self.headers.items()],
                "body": body.decode("utf-8", "replace"),
            }
            with lock, open(log_path, "a") as log:
                log.write(json.dumps(seen) + "\n")
            if url.path == "/redirect":
                return self.reply(302, b"", [("location", query["to"][0])])
            if url.path == "/bytes":
                return self.reply(200, b"x" * int(query["n"][0]))
            if url.path == "/remember":
                remembered.update({k.lower(): v for k, v in self.headers.items()})
                return self.reply(200, b"kept")
            if url.path == "/recall":
                return self.reply(200, json.dumps(remembered).encode(), [("x-recalled", remembered.get("x-copy", ""))])
            if url.path == "/land-on-it":
                return self.reply(302, b"", [("location", "/landing?k=" + remembered.get("x-copy", ""))])
            if url.path == "/slow":
                time.sleep(int(query["ms"][0]) / 1000)
                return self.reply(200, b"slow")
            if url.path.startswith("/files/"):
                path = os.path.join(files_dir, url.path[len("/files/"):])
                if os.path.isdir(path):
                    path = os.path.join(path, "index.html")
                if not os.path.isfile(path):
                    return self.reply(404, b"no such file")
                with open(path, "rb") as f:
                    kind = "text/html" if path.endswith(".html") else "application/octet-stream"
                    return self.reply(200, f.read(), [("content-type", kind)])
            return self.reply(200, json.dumps(seen).encode(), [("content-type", "application/json")])

        def reply(self, status, body, headers=()):
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = handle_any

        def log_message(self, *args):
            pass

    return Handler


def write_index(files_dir):
    """A PEP 503 simple index of one wheel (micropip reads it)."""
    name, module = "runbox_egress_probe-1.0", "runbox_egress_probe"
    members = {
        f"{module}/__init__.py": b"VALUE = 42\n",
        f"{name}.dist-info/METADATA": b"Metadata-Version: 2.1\nName: runbox-egress-probe\nVersion: 1.0\n",
        f"{name}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: upstream.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{name}.dist-info/RECORD,,")
    members[f"{name}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for path, data in members.items():
            wheel.writestr(path, data)
    wheel_name = f"{name}-py3-none-any.whl"
    package_dir = os.path.join(files_dir, "simple", "runbox-egress-probe")
    os.makedirs(package_dir, exist_ok=True)
    with open(os.path.join(package_dir, wheel_name), "wb") as f:
        f.write(buffer.getvalue())
    sha = hashlib.sha256(buffer.getvalue()).hexdigest()
    with open(os.path.join(package_dir, "index.html"), "w") as f:
        f.write(f'<html><body><a href="{wheel_name}#sha256={sha}">{wheel_name}</a></body></html>\n')
    os.makedirs(os.path.join(files_dir, "pyodide"), exist_ok=True)
    with open(os.path.join(files_dir, "pyodide", "micropip-0.11.1-py3-none-any.whl"), "wb") as f:
        f.write(b"not the wheel Pyodide's lock file pins")


def main():
    parser = argparse.ArgumentParser()
    for name in ["--cert", "--key", "--log", "--files"]:
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    write_index(args.files)
    plain = ThreadingHTTPServer(("127.0.0.1", 0), handler(args.log, args.files, "http"))
    secure = ThreadingHTTPServer(("127.0.0.1", 0), handler(args.log, args.files, "https"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    threading.Thread(target=secure.serve_forever, daemon=True).start()
    print("listening", plain.server_address[1], secure.server_address[1], flush=True)
    plain.serve_forever()


if __name__ == "__main__":
    main()
