"""A real stack for the client tests: a private redis-server, the runbox
api and one worker, from target/debug (or RUNBOX_BIN_DIR)."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("RUNBOX_BIN_DIR", ROOT / "target" / "debug"))
TOKEN = "python-client-token-0123456789"
OTHER_TOKEN = "python-other-token-0123456789"
SIGNING_KEY = "python-client-signing-key-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    def __init__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="runbox-py-client-")
        self.procs: list[subprocess.Popen] = []
        redis_port = free_port()
        self.env = {
            **os.environ,
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}",
            "RUNBOX_API_TOKENS": f"client:{TOKEN},other:{OTHER_TOKEN}",
            "RUNBOX_SIGNING_KEY": SIGNING_KEY,
            # Sessions hold a slot each: room for a session and its fork beside jobs.
            "RUNBOX_WORKER_CONCURRENCY": "3",
            "RUST_LOG": "warn",
        }
        self.procs.append(
            subprocess.Popen(
                ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL,
            )
        )
        self.url = self.api()
        self.procs.append(self.spawn("runbox-worker", {}))
        self.until(lambda: httpx.get(f"{self.url}/v1/runtimes", headers=self.auth()).json()["workers"])

    def auth(self) -> dict:
        return {"Authorization": f"Bearer {TOKEN}"}

    def spawn(self, name: str, env: dict) -> subprocess.Popen:
        log = open(Path(self.tmp.name) / f"{name}-{len(self.procs)}.log", "w")
        return subprocess.Popen([str(BIN / name)], env={**self.env, **env}, stderr=log)

    def api(self, **env: str) -> str:
        """Starts an api process (with extra settings); returns its URL."""
        port = free_port()
        self.procs.append(self.spawn("runbox-api", {"PORT": str(port), **env}))
        url = f"http://127.0.0.1:{port}"
        self.until(lambda: httpx.get(f"{url}/readyz").status_code == 200)
        return url

    @staticmethod
    def until(ready, limit_s: float = 60) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            time.sleep(0.1)
        raise RuntimeError("the runbox stack did not start")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.kill()
            proc.wait()
        self.tmp.cleanup()


@pytest.fixture(scope="session")
def stack():
    stack = Stack()
    yield stack
    stack.stop()
