"""Typed views of what runbox returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

FINAL = {"completed", "timeout", "memory_exceeded", "rejected", "cancelled", "worker_lost", "internal_error"}


@dataclass(frozen=True)
class OutputFile:
    path: str
    content: str  # base64
    size: int
    truncated: bool


@dataclass(frozen=True)
class Job:
    """One job. `status` says how it ended (or that it has not yet); a
    program that exits non-zero is `completed` with its `exit_code`."""

    id: str
    status: str
    language: Optional[str] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    verdict: Optional[str] = None
    duration_ms: Optional[int] = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    files: list[OutputFile] = field(default_factory=list)
    files_truncated: bool = False
    #: Ran in one of the token's long-lived children that had already run
    #: another of its jobs.
    warm: bool = False
    #: CPU time (user + system) and peak memory runbox measured for the job.
    cpu_ms: Optional[int] = None
    peak_memory_bytes: Optional[int] = None
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    timings: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.status in FINAL

    @property
    def ok(self) -> bool:
        """Ran to its end with exit code 0 (and, with `expected_stdout`, accepted)."""
        return self.status == "completed" and self.exit_code == 0 and self.verdict in (None, "accepted")

    @classmethod
    def from_json(cls, data: dict) -> "Job":
        files = [OutputFile(**f) for f in data.get("files") or []]
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "files"}
        return cls(files=files, **known)


@dataclass(frozen=True)
class OutputEvent:
    """One event of a job's live output (`Client.stream`): a chunk of
    `"stdout"` or `"stderr"` whose `data` starts `offset` bytes into the
    stream, a `"restart"` (the job runs again from the start on another
    worker), or the last, `"result"`, with the finished `job`."""

    kind: str
    offset: int = 0
    data: str = ""
    job: Optional[Job] = None


@dataclass(frozen=True)
class Batch:
    """A batch: counts by status and verdict, and one page of its jobs."""

    id: str
    status: str
    size: int
    counts: dict[str, int]
    verdicts: dict[str, int]
    jobs: list[Job]
    next_offset: Optional[int] = None

    @property
    def done(self) -> bool:
        return self.status == "finished"

    @classmethod
    def from_json(cls, data: dict) -> "Batch":
        return cls(
            id=data["id"],
            status=data.get("status", ""),
            size=data.get("size", 0),
            counts=data.get("counts", {}),
            verdicts=data.get("verdicts", {}),
            jobs=[Job.from_json(j) for j in data.get("jobs", [])],
            next_offset=data.get("next_offset"),
        )


#: Statuses of a session that has ended: it will not run anything again.
SESSION_ENDED = {"closed", "expired", "lost"}


@dataclass(frozen=True)
class Checkpoint:
    """A saved state of a session: `create_session(from_checkpoint=id)`
    starts a new session from it, until `expires_at`."""

    id: str
    created_at: str
    size_bytes: int
    took_ms: int
    expires_at: str

    @classmethod
    def from_json(cls, data: dict) -> "Checkpoint":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class SessionInfo:
    """A session as runbox shows it. `status` is `starting`, `idle`,
    `busy`, `restoring`, or one of the ended ones (`closed`, `expired`,
    `lost`, with `ended_reason`)."""

    id: str
    language: str
    status: str
    worker: Optional[str] = None
    created_at: Optional[str] = None
    last_used_at: Optional[str] = None
    idle_timeout_s: Optional[int] = None
    expires_at: Optional[str] = None
    execs: int = 0
    checkpoints: list[Checkpoint] = field(default_factory=list)
    ended_reason: Optional[str] = None
    restored_from: Optional[str] = None

    @property
    def ended(self) -> bool:
        return self.status in SESSION_ENDED

    @classmethod
    def from_json(cls, data: dict) -> "SessionInfo":
        checkpoints = [Checkpoint.from_json(c) for c in data.get("checkpoints") or []]
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "checkpoints"}
        return cls(checkpoints=checkpoints, **known)


@dataclass(frozen=True)
class SessionExec(Job):
    """One exec in a session: the job (its status, exit code and output:
    a non-zero exit is data, as for any job) plus the session's status
    after it. `restored_from` is set when the session had to be brought
    back from that checkpoint during the call: what ran after it is gone."""

    session_id: Optional[str] = None
    session_status: Optional[str] = None
    restored_from: Optional[str] = None

    @classmethod
    def from_json(cls, data: dict) -> "SessionExec":
        job = Job.from_json(data)
        session = data.get("session") or {}
        return cls(
            **{name: getattr(job, name) for name in Job.__dataclass_fields__},
            session_id=session.get("id"),
            session_status=session.get("status"),
            restored_from=session.get("restored_from"),
        )


@dataclass(frozen=True)
class FileWritten:
    """A file uploaded to a session: its path and size in bytes."""

    path: str
    size: int

    @classmethod
    def from_json(cls, data: dict) -> "FileWritten":
        return cls(path=data["path"], size=data["size"])


@dataclass(frozen=True)
class FileEntry:
    """One entry of a session's directory: `type` is `file`, `directory`
    or `link` (a link its code made; never followed); `modified` is RFC 3339."""

    name: str
    path: str
    type: str
    size: int
    modified: str


@dataclass(frozen=True)
class FileListing:
    """A directory of a session's home (`path` is empty for the home);
    `truncated` when it held more entries than runbox lists."""

    path: str
    files: list[FileEntry]
    truncated: bool = False

    @classmethod
    def from_json(cls, data: dict) -> "FileListing":
        files = [FileEntry(**{k: f[k] for k in FileEntry.__dataclass_fields__}) for f in data.get("files") or []]
        return cls(path=data.get("path", ""), files=files, truncated=data.get("truncated", False))
