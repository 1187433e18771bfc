"""Points E2B's SDKs at runbox's /e2b on a real stack (run under
clients/with-stack), before any test module imports them, and holds the
helpers both the sync and the async suites use."""

import os

import httpx

BASE = os.environ["RUNBOX_URL"]
TOKEN = os.environ["RUNBOX_TOKEN"]
OTHER_TOKEN = os.environ["RUNBOX_OTHER_TOKEN"]
E2B_URL = f"{BASE}/e2b"

# The SDKs read these whenever they build a connection, so setting them here,
# before the test modules are collected, configures every call.
os.environ["E2B_API_URL"] = E2B_URL
os.environ["E2B_SANDBOX_URL"] = E2B_URL
os.environ["E2B_API_KEY"] = TOKEN
for variable in ("E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"):
    os.environ.pop(variable, None)

# The ports E2B's SDKs name in E2b-Sandbox-Port: envd (files, filesystem
# RPCs) and the code interpreter (/execute, /contexts).
ENVD_PORT = 49983
INTERPRETER_PORT = 49999

# A probe whose only effect is a file, so an owner can tell afterwards
# whether a refused request ran anyway.
PROBE_CODE = "open('{name}', 'w').write('the probe ran')"


def sandbox_headers(sandbox_id, port, access_token=None):
    """The headers E2B's SDKs put on a data-plane request, with
    `access_token` as X-Access-Token (none when it is None)."""
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(port)}
    if access_token is not None:
        headers["X-Access-Token"] = access_token
    return headers


def raw_execute(sandbox_id, access_token, code):
    """POST /e2b/execute as the code interpreter SDK sends it."""
    return httpx.post(
        f"{E2B_URL}/execute",
        json={"code": code, "context_id": None, "language": None, "env_vars": None},
        headers=sandbox_headers(sandbox_id, INTERPRETER_PORT, access_token),
        timeout=120,
    )


def raw_read(sandbox_id, access_token, path):
    """GET /e2b/files?path=... as files.read sends it."""
    return httpx.get(
        f"{E2B_URL}/files",
        params={"path": path},
        headers=sandbox_headers(sandbox_id, ENVD_PORT, access_token),
        timeout=60,
    )


def raw_write(sandbox_id, access_token, path, data):
    """POST /e2b/files?path=... multipart, as files.write sends it."""
    return httpx.post(
        f"{E2B_URL}/files",
        params={"path": path},
        files=[("file", (path, data))],
        headers=sandbox_headers(sandbox_id, ENVD_PORT, access_token),
        timeout=60,
    )


def raw_list_dir(sandbox_id, access_token, path):
    """POST /e2b/filesystem.Filesystem/ListDir, a Connect unary call in JSON
    as files.list sends it."""
    headers = sandbox_headers(sandbox_id, ENVD_PORT, access_token)
    headers.update({"Content-Type": "application/json", "Connect-Protocol-Version": "1"})
    return httpx.post(
        f"{E2B_URL}/filesystem.Filesystem/ListDir",
        json={"path": path, "depth": 1},
        headers=headers,
        timeout=60,
    )


# (what, token) pairs a data-plane request must be refused with: a made-up
# token and none at all. A token another sandbox was given is tried in the
# tests that have one.
WRONG_TOKENS = [("a made-up token", "not-the-access-token-0123456789"), ("no token", None)]
