"""Python client for runbox: run JavaScript, TypeScript and Python in a
deny-all sandbox over HTTP.

    from runbox import Client
    with Client("http://127.0.0.1:8080", "TOKEN") as runbox:
        job = runbox.run("print(6 * 7)")
        print(job.status, job.exit_code, job.stdout)
"""

from .client import AsyncBatchHandle, AsyncClient, AsyncSession, BatchHandle, Client, Session, job_spec
from .errors import (
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    RunboxError,
    SessionBusy,
    SessionEnded,
    TransportError,
    Unauthorized,
    Unavailable,
)
from .types import (
    Batch,
    Checkpoint,
    FileEntry,
    FileListing,
    FileWritten,
    Job,
    OutputEvent,
    OutputFile,
    SessionExec,
    SessionInfo,
)

__all__ = [
    "AsyncBatchHandle",
    "AsyncClient",
    "AsyncSession",
    "Batch",
    "BatchHandle",
    "Checkpoint",
    "Client",
    "FileEntry",
    "FileListing",
    "FileWritten",
    "InvalidRequest",
    "Job",
    "NotFound",
    "OutputEvent",
    "OutputFile",
    "QuotaExceeded",
    "RunboxError",
    "Session",
    "SessionBusy",
    "SessionEnded",
    "SessionExec",
    "SessionInfo",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "job_spec",
]
