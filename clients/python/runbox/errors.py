"""What the client raises. A program that fails is data (a `Job` with its
status and exit code), never an exception; these are for requests runbox
refused or could not answer."""

from __future__ import annotations


class RunboxError(Exception):
    """runbox answered with an error: `status` is the HTTP status, `code`
    the error code from the body (see the error table in runbox's
    docs/api.md)."""

    def __init__(self, status: int, code: str, message: str, body: dict | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body or {}


class InvalidRequest(RunboxError):
    """400, 413, 415 or 422: the request itself is wrong; retrying will not
    help. 422 is `checkpoint_failed`: the session holds something that
    cannot be saved (the message says what)."""


class Unauthorized(RunboxError):
    """401: no token, or a wrong one."""


class NotFound(RunboxError):
    """404: no such job, batch, session (`no_session`) or checkpoint
    (`no_checkpoint`), or it belongs to another token."""


class SessionBusy(RunboxError):
    """409 `session_busy`: the session is running another exec, taking a
    checkpoint, or still starting. Never retried by the client: the other
    exec may still be running, and only the caller knows whether to wait
    for it or send this one again."""


class SessionEnded(RunboxError):
    """410: the session has ended; `code` says how: `session_closed`
    (destroyed), `session_expired` (idle or lifetime limit) or
    `session_lost` (its worker stopped and it had no checkpoint)."""


class QuotaExceeded(RunboxError):
    """429 after every retry: the token's quota stayed full
    (`quota_exceeded`), or it still held its most live sessions
    (`too_many_sessions`)."""


class Unavailable(RunboxError):
    """503 after every retry: the queue stayed full (`queue_full`), Redis
    unreachable (`unavailable`), or no worker could open a session
    (`session_unavailable`)."""


class TransportError(Exception):
    """runbox could not be reached, or did not answer in time."""


def error_code(body: object) -> str:
    """The server's error code in an error body (`unknown` if none)."""
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code", "unknown") if isinstance(error, dict) else "unknown"


def error_for(status: int, body: dict) -> RunboxError:
    error = body.get("error") if isinstance(body, dict) else None
    code = error_code(body)
    message = error.get("message", "") if isinstance(error, dict) else str(body)
    kinds = {401: Unauthorized, 404: NotFound, 409: SessionBusy, 410: SessionEnded, 429: QuotaExceeded, 503: Unavailable}
    kind = kinds.get(status)
    if kind is None:
        kind = InvalidRequest if 400 <= status < 500 else RunboxError
    return kind(status, code, message, body if isinstance(body, dict) else None)
