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
