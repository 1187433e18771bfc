"""Schemathesis hooks for the runbox native API (loaded via SCHEMATHESIS_HOOKS).

A schema-valid `callback_url` that schemathesis invents names a host this
machine cannot resolve (or one outside RUNBOX_CALLBACK_ALLOW), and the api
rightly refuses it with 400: whether a URL can be called back is decided at
run time, not by its shape. So in positive test cases only, a string
`callback_url` is replaced by the address of a local sink that answers every
callback with 204; negative cases are sent as generated, so a malformed
`callback_url` must still be refused.

Likewise an exec's `stdin` and `return_files` are refused (400) in a
JavaScript session, and the schema cannot know which language the session
a test case names runs: positive exec cases are sent without them.

A file path may be at most 255 bytes, and JSON Schema can only count
characters: positive cases with a path longer than 255 bytes in UTF-8 are
not sent (they are not valid, though the schema cannot say so).
"""

import http.server
import threading

import schemathesis
from schemathesis import GenerationMode


class _Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
threading.Thread(target=_server.serve_forever, daemon=True).start()
SINK = f"http://127.0.0.1:{_server.server_address[1]}/callback"


MAX_PATH_BYTES = 255


def _paths(value, key=None):
    """Every file path in a request body: `files[].path` and `return_files[]`."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, k)
    elif isinstance(value, list):
        for item in value:
            if key == "files" and isinstance(item, dict) and isinstance(item.get("path"), str):
                yield item["path"]
            elif key == "return_files" and isinstance(item, str):
                yield item
            else:
                yield from _paths(item)


@schemathesis.hook
def filter_case(context, case):
    meta = getattr(case, "meta", None)
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return True
    return all(len(p.encode("utf-8", "surrogatepass")) <= MAX_PATH_BYTES for p in _paths(case.body))


@schemathesis.hook
def before_call(context, case, **kwargs):
    meta = getattr(case, "meta", None)
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return
    if not isinstance(case.body, dict):
        return
    if isinstance(case.body.get("callback_url"), str):
        case.body["callback_url"] = SINK
    if case.operation.method.upper() == "POST" and case.operation.path == "/v1/sessions/{id}/exec":
        case.body.pop("stdin", None)
        case.body.pop("return_files", None)
