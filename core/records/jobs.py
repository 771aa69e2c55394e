"""Job records: `.ai/jobs/<job>.json` — the user's request in their own words, its corrections
(revisions; the original is never overwritten), acceptance, decisions, screenshots and the
coordinator pinned once chosen. Committed with the project; written atomically under a per-job
lock (the operator and the supervisor may write the same job at once), each write evented.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.names import MAX_NAME_CHARS as MAX_NAME_CHARS
from pilothouse.core.records.names import NAME_RE as NAME_RE
from pilothouse.core.records.names import validate_name as validate_name
from pilothouse.core.state.events import EventLog, utc_now_iso
from pilothouse.providers import guard
from pilothouse.providers.errors import UserError
from pilothouse.providers.fsutil import atomic_write_text
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_ATTACHMENTS = 10
MAX_ATTACHMENT_BYTES = 8 * 1024 * 1024
MAX_REQUEST_CHARS = 200_000


class Revision(BaseModel):
    revision: int
    request: str
    at: str


class Decision(BaseModel):
    text: str
    at: str


class Attachment(BaseModel):
    path: str  # relative to the repository root (under .ai/runtime/attachments/<job>/)
    sha256: str
    mime: str
    name: str = ""  # the file's original name, for people
    size: int = 0
    revision: int = 1

    @field_validator("path")
    @classmethod
    def _inside_attachments(cls, v: str) -> str:
        # a job file can arrive through a merge of a worker's branch: its attachments must still be
        # the copies pilothouse made, never a path that leads anywhere else on the host
        parts = PurePosixPath(v).parts
        if v.startswith("/") or ".." in parts or tuple(parts[:3]) != (".ai", "runtime", "attachments"):
            raise ValueError(f"attachment path {v!r} is not under .ai/runtime/attachments/: "
                             "remove the entry or attach the file again")
        return v


class CoordinatorPin(BaseModel):
    provider: str
    model: str | None = None
    pinned_at: str = ""


OUTCOMES = ("accepted", "shipped", "cancelled")


class Outcome(BaseModel):
    """How the job's revision `revision` ended, kept in its committed record so a fresh clone (or a
    state.db rebuilt by `maintain repair`) knows it and never runs finished work again."""

    state: str
    revision: int
    at: str
    head: str | None = None  # the job's line's head the reviews and the full gate passed
    onto: str | None = None  # shipped: the base branch it landed on
    previous: str | None = None  # shipped: that branch's head before (the commit bringing this record is the ship)
    tasks: list[str] = Field(default_factory=list)

    @field_validator("state")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in OUTCOMES:
            raise ValueError(f"{v!r} is not an outcome: one of {', '.join(OUTCOMES)}")
        return v

    def says(self) -> str:
        """The job's reason, as `job status` gives it, from the record alone."""
        if self.state == "shipped":
            return f"shipped onto {self.onto or 'the base branch'} (from the record)"
        return f"{self.state} (from the record)"


class Job(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    created_at: str
    revisions: list[Revision]
    acceptance: str | None = None
    decisions: list[Decision] = Field(default_factory=list)
    attachments: list[Attachment] = Field(default_factory=list)
    coordinator: CoordinatorPin | None = None
    # a simulator scenario scripting every run of this job (job create --sim-scenario)
    sim_scenario: str | None = None
    outcome: Outcome | None = None

    def finished(self) -> Outcome | None:
        """The recorded outcome when it is for the current revision (a correction plans again)."""
        return self.outcome if self.outcome is not None and self.outcome.revision >= self.revision else None

    @property
    def revision(self) -> int:
        return self.revisions[-1].revision

    @property
    def request(self) -> str:
        """The latest request text (earlier revisions stay in `revisions`)."""
        return self.revisions[-1].request

    def attachment_paths(self, layout: RepoLayout) -> list[Path]:
        return [layout.root / a.path for a in self.attachments]


def _path(layout: RepoLayout, name: str) -> Path:
    return layout.jobs_dir / f"{validate_name(name)}.json"


@contextmanager
def _locked(layout: RepoLayout, name: str) -> Iterator[None]:
    lock_dir = layout.runtime / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"job-{validate_name(name)}.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _write(layout: RepoLayout, job: Job) -> None:
    atomic_write_text(_path(layout, job.name), record_text(job))


def _events(layout: RepoLayout) -> EventLog:
    return EventLog(layout.events)


# ---------------------------------------------------------------- attachments

_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
)
_EXT = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}


def sniff_image(head: bytes) -> str | None:
    """The image type from the file's first bytes (names lie), or None."""
    for magic, offset, mime in _MAGIC:
        if head[offset:offset + len(magic)] == magic:
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _check_attachment(path: Path) -> tuple[str, int]:
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(16)
    except FileNotFoundError:
        raise UserError(f"--attach {path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"--attach {path}: is a directory, not an image") from None
    mime = sniff_image(head)
    if mime is None:
        raise UserError(f"--attach {path}: not a PNG, JPEG, GIF or WebP image (checked by content): "
                        "attach a screenshot in one of those formats")
    if size > MAX_ATTACHMENT_BYTES:
        raise UserError(f"--attach {path}: {size / 1024 / 1024:.1f} MB is over the 8 MB limit: shrink or crop it")
    return mime, size


def _store_attachments(layout: RepoLayout, job: Job, files: Sequence[Path | str], revision: int) -> None:
    sources = [Path(f) for f in files]
    if not sources:
        return
    checked = [(f, *_check_attachment(f)) for f in sources]
    for n, (src, _mime, _size) in enumerate(checked, 1):
        # the name is kept in the record and shown to the models; never echoed back here
        guard.check_words(src.name, f"the name of attachment #{n}")
    if len(job.attachments) + len(checked) > MAX_ATTACHMENTS:
        raise UserError(f"job {job.name}: at most {MAX_ATTACHMENTS} screenshots per job "
                        f"({len(job.attachments)} already attached): attach fewer")
    dest_dir = layout.attachments / job.name
    dest_dir.mkdir(parents=True, exist_ok=True)
    for src, mime, size in checked:
        data = src.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if any(a.sha256 == digest for a in job.attachments):
            continue
        dest = dest_dir / f"{digest[:12]}{_EXT[mime]}"
        tmp = dest.with_name(f".{dest.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(dest)
        job.attachments.append(Attachment(path=str(dest.relative_to(layout.root)), sha256=digest, mime=mime,
                                          name=src.name, size=size, revision=revision))


def read_attachment(layout: RepoLayout, job: str, rel: str) -> bytes:
    """A stored attachment's bytes, only from the job's own attachment folder and through the
    door (providers/workerfs.py: no link followed on the way, no FIFO opened, bounded): the record
    is a file in the repository, so its path is checked rather than trusted."""
    from pilothouse.providers import workerfs

    folder = (layout.attachments / job).resolve()
    path = layout.root / rel
    if path.parent.resolve() != folder or os.path.islink(path):
        raise UserError(f"attachment {rel}: not in {folder}: the job record was changed by hand")
    try:
        entry = workerfs.read(layout.root, rel, MAX_ATTACHMENT_BYTES)
    except (OSError, ValueError) as exc:
        raise UserError(f"attachment {rel}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    if entry.kind != "file":
        raise UserError(f"attachment {rel}: not a regular file ({entry.kind}); the job record was changed by hand")
    if entry.truncated:
        raise UserError(f"attachment {rel}: over the 8 MB limit")
    return entry.data


# ---------------------------------------------------------------- API


def _check_request(request: str, what: str = "request", acceptance: str | None = None) -> str:
    if not isinstance(request, str) or not request.strip():
        raise UserError(f"the {what} is empty: write what you want in the file, in your own words")
    if len(request) > MAX_REQUEST_CHARS:
        raise UserError(f"the {what} is {len(request)} characters (limit {MAX_REQUEST_CHARS}): shorten it "
                        "and attach details as files in the repository")
    guard.check_words(request, f"the {what}")
    guard.check_words(acceptance, "the acceptance criteria")
    return request


def load_job(layout: RepoLayout, name: str) -> Job:
    from pilothouse.providers.userfile import read_text

    path = _path(layout, name)
    try:
        # bounded, and a regular file only: a record that is a FIFO or a link to /dev/zero is refused
        raw = json.loads(read_text(path, f".ai/jobs/{name}.json", not_text_fix="restore it from git"))
    except FileNotFoundError:
        raise UserError(f"no job named {name!r}: `pilothouse job list` shows the jobs") from None
    except ValueError as exc:
        raise UserError(f".ai/jobs/{name}.json: invalid JSON ({exc}): restore it from git") from None
    try:
        return Job.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        raise UserError(f".ai/jobs/{name}.json: {field}: {err['msg']}: restore it from git") from None


def list_jobs(layout: RepoLayout) -> list[Job]:
    """Every job of the repository, oldest first; unreadable records are skipped."""
    jobs = []
    for path in sorted(layout.jobs_dir.glob("*.json")):
        if not NAME_RE.match(path.stem):
            continue
        try:
            jobs.append(load_job(layout, path.stem))
        except UserError:
            continue
    return sorted(jobs, key=lambda j: (j.created_at, j.name))


def create_job(layout: RepoLayout, name: str, request: str, acceptance: str | None = None,
               attachments: Sequence[Path | str] = (), sim_scenario: str | None = None) -> Job:
    validate_name(name)
    _check_request(request, acceptance=acceptance)
    if acceptance is not None and not acceptance.strip():
        acceptance = None
    with _locked(layout, name):
        if _path(layout, name).exists():
            raise UserError(f"job {name} already exists: correct it with `pilothouse job update {name} "
                            "--request-file F`, or pick another name")
        now = utc_now_iso()
        job = Job(name=name, created_at=now, revisions=[Revision(revision=1, request=request, at=now)],
                  acceptance=acceptance, sim_scenario=sim_scenario)
        _store_attachments(layout, job, attachments, 1)
        # written under the event log's lock (see EventLog.append): the supervisor's reaction to
        # the record is logged after this event
        _events(layout).append("job.created", job=name, data={
            "revision": 1, "request_chars": len(request), "acceptance": acceptance is not None,
            "attachments": len(job.attachments), "sim_scenario": sim_scenario},
            commit=lambda: _write(layout, job))
    return job


def update_job(layout: RepoLayout, name: str, request: str, attachments: Sequence[Path | str] = (),
               acceptance: str | None = None) -> Job:
    """Add a correction: a new revision (the earlier ones are kept); new launches wait for the re-plan."""
    _check_request(request, "correction", acceptance)
    with _locked(layout, name):
        job = load_job(layout, name)
        rev = job.revision + 1
        job.revisions.append(Revision(revision=rev, request=request, at=utc_now_iso()))
        if acceptance is not None and acceptance.strip():
            job.acceptance = acceptance
        _store_attachments(layout, job, attachments, rev)
        _events(layout).append("job.revised", job=name, data={"revision": rev, "request_chars": len(request)},
                               commit=lambda: _write(layout, job))
    return job


def decide(layout: RepoLayout, name: str, text: str) -> Job:
    """Record an operator's decision (e.g. an answer to an open question); the assigner reads them."""
    if not text or not text.strip():
        raise UserError("the decision is empty: write it as TEXT, e.g. job decide NAME \"use SQLite\"")
    guard.check_words(text, "the decision")
    with _locked(layout, name):
        job = load_job(layout, name)
        job.decisions.append(Decision(text=text.strip(), at=utc_now_iso()))
        _events(layout).append("job.decided", job=name, data={"text": text.strip(), "count": len(job.decisions)},
                               commit=lambda: _write(layout, job))
    return job


def pin_coordinator(layout: RepoLayout, name: str, provider: str, model: str | None = None) -> Job:
    """Pin the coordinator once; a later call returns the job with the first pin unchanged."""
    with _locked(layout, name):
        job = load_job(layout, name)
        if job.coordinator is not None:
            return job
        job.coordinator = CoordinatorPin(provider=provider, model=model, pinned_at=utc_now_iso())
        _events(layout).append("job.pinned", job=name, data={"provider": provider, "model": model},
                               commit=lambda: _write(layout, job))
    return job


def record_outcome(layout: RepoLayout, name: str, outcome: Outcome) -> Job:
    """Write the job's outcome into its record (atomically, under the job's lock, evented)."""
    with _locked(layout, name):
        job = load_job(layout, name)
        job.outcome = outcome
        _events(layout).append("job.recorded", job=name, data={"outcome": outcome.state, "revision": outcome.revision},
                               commit=lambda: _write(layout, job))
    return job


def record_text(job: Job) -> str:
    """The record's file content, as _write makes it (ship commits it)."""
    # no outcome yet: the record stays as it always was (no "outcome": null in every job file)
    return json.dumps(job.model_dump(mode="json", exclude={"outcome"} if job.outcome is None else None),
                      indent=2) + "\n"


def remove_job(layout: RepoLayout, name: str) -> None:
    """Remove the job's record and its stored screenshots (`job delete`; the event log keeps its history)."""
    import shutil

    with _locked(layout, name):
        _path(layout, name).unlink(missing_ok=True)
        shutil.rmtree(layout.attachments / validate_name(name), ignore_errors=True)
