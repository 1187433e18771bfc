"""What the client raises. A program that fails is data (a `Job` with its
status and exit code), never an exception; these are for requests runbox
refused or could not answer."""

from __future__ import annotations


class RunboxError(Exception):
    """runbox answered with an error: `status` is the HTTP status, `code`
    the error code from the body (see the README's error table)."""

    def __init__(self, status: int, code: str, message: str, body: dict | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body or {}


class InvalidRequest(RunboxError):
    """400, 413 or 415: the request itself is wrong; retrying will not help."""


class Unauthorized(RunboxError):
    """401: no token, or a wrong one."""


class NotFound(RunboxError):
    """404: no such job or batch (or it belongs to another token)."""


class QuotaExceeded(RunboxError):
    """429 after every retry: the token's quota stayed full."""


class Unavailable(RunboxError):
    """503 after every retry: the queue stayed full (`queue_full`) or Redis
    unreachable (`unavailable`)."""


class TransportError(Exception):
    """runbox could not be reached, or did not answer in time."""


def error_for(status: int, body: dict) -> RunboxError:
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code", "unknown") if isinstance(error, dict) else "unknown"
    message = error.get("message", "") if isinstance(error, dict) else str(body)
    kind = {401: Unauthorized, 404: NotFound, 429: QuotaExceeded, 503: Unavailable}.get(status)
    if kind is None:
        kind = InvalidRequest if 400 <= status < 500 else RunboxError
    return kind(status, code, message, body if isinstance(body, dict) else None)
