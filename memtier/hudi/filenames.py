"""Hudi data file names as value types: ``BaseFile.parse(name).name == name``.

* base file: ``<fileId>_<writeToken>_<instant>.<ext>``, e.g.
  ``d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_0-13-60_20250331030642808.parquet``;
* log file: ``.<fileId>_<instant>.log.<version>[_<writeToken>[.cdc]]`` (Hudi's regex
  ``^\\.(.+)_(.*)\\.(log|archive)\\.(\\d+)(_((\\d+)-(\\d+)-(\\d+))(.cdc)?)?``), where
  ``<instant>`` is the slice's base instant on table version 6 and the writing
  deltacommit's instant on version 8.

File ids are ``<uuid>-<n>``, or for the bucket index ``<bucket %08d>-0000-0000-0000-000000000000-0``;
they never contain ``_`` or ``.``. Write tokens are ``<taskPartition>-<stage>-<attempt>``.
Anything else in a partition folder (``.hoodie_partition_metadata``, temporary files,
``.crc`` files) is not a data file: :func:`classify` returns None for it. That includes a
log file written ahead of its commit (:class:`PendingLogFile`), which gets its log file
name when the commit completes.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from memtier.errors import InvalidArgumentError

__all__ = [
    "BaseFile",
    "LogFile",
    "PendingLogFile",
    "WriteToken",
    "bucket_file_id",
    "bucket_of_file_id",
    "bucket_or_none",
    "classify",
    "new_bucket_file_id",
]

_FILE_ID = r"[^._/]+"
_INSTANT = r"\d+"
_TOKEN = r"\d+-\d+-\d+"
_BASE_RE = re.compile(rf"({_FILE_ID})_({_TOKEN})_({_INSTANT})\.([A-Za-z0-9]+)", re.ASCII)
_LOG_RE = re.compile(
    rf"\.({_FILE_ID})_({_INSTANT})\.(log|archive)\.(0|[1-9]\d*)(?:_({_TOKEN})(\.cdc)?)?", re.ASCII
)
#: A temporary file's name (:func:`memtier.io.is_temp_file`): crashes leave none a reader takes.
_PENDING_RE = re.compile(rf"\.memtier-tmp-({_FILE_ID})_({_TOKEN})_([0-9a-f]{{32}})\.tmp", re.ASCII)
_FILE_ID_RE = re.compile(_FILE_ID)
_INSTANT_RE = re.compile(_INSTANT, re.ASCII)
_TOKEN_RE = re.compile(_TOKEN, re.ASCII)
_EXTENSION_RE = re.compile(r"[A-Za-z0-9]+")


def _check(pattern: re.Pattern[str], value: str, what: str) -> None:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidArgumentError(f"invalid {what} {value!r} (must match {pattern.pattern})")


@dataclass(frozen=True)
class WriteToken:
    """``<taskPartitionId>-<stageId>-<taskAttemptId>``; unique per write attempt."""

    task_partition: int
    stage: int
    attempt: int

    def __post_init__(self) -> None:
        for value in (self.task_partition, self.stage, self.attempt):
            if not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"write token parts must be ints >= 0, got {self!r}")

    @classmethod
    def parse(cls, text: str) -> WriteToken:
        """Parse ``"0-13-60"``; :class:`InvalidArgumentError` on anything else."""
        _check(_TOKEN_RE, text, "write token")
        task_partition, stage, attempt = (int(part) for part in text.split("-"))
        return cls(task_partition, stage, attempt)

    def __str__(self) -> str:
        return f"{self.task_partition}-{self.stage}-{self.attempt}"


@dataclass(frozen=True)
class BaseFile:
    """A base (columnar) file of one file slice."""

    file_id: str
    write_token: str
    instant: str
    extension: str = "parquet"

    def __post_init__(self) -> None:
        _check(_FILE_ID_RE, self.file_id, "file id")
        _check(_TOKEN_RE, self.write_token, "write token")
        _check(_INSTANT_RE, self.instant, "instant time")
        _check(_EXTENSION_RE, self.extension, "base file extension")

    @property
    def name(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant}.{self.extension}"

    @classmethod
    def parse(cls, name: str) -> BaseFile:
        """The base file called ``name``; :class:`InvalidArgumentError` if it is not one."""
        match = _BASE_RE.fullmatch(name)
        if match is None:
            raise InvalidArgumentError(f"{name!r} is not a Hudi base file name")
        return cls(*match.groups())


@dataclass(frozen=True)
class LogFile:
    """A log file of one file slice (``extension`` is ``log``, or ``archive`` for archived)."""

    file_id: str
    base_instant: str
    version: int
    write_token: str | None
    extension: str = "log"
    cdc: bool = False

    def __post_init__(self) -> None:
        _check(_FILE_ID_RE, self.file_id, "file id")
        _check(_INSTANT_RE, self.base_instant, "instant time")
        if not isinstance(self.version, int) or self.version < 0:
            raise InvalidArgumentError(f"log version must be an int >= 0, got {self.version!r}")
        if self.write_token is not None:
            _check(_TOKEN_RE, self.write_token, "write token")
        if self.extension not in ("log", "archive"):
            raise InvalidArgumentError(
                f"log extension must be log or archive, got {self.extension!r}"
            )
        if self.cdc and self.write_token is None:
            raise InvalidArgumentError("a .cdc log file name needs a write token")

    @property
    def name(self) -> str:
        head = f".{self.file_id}_{self.base_instant}.{self.extension}.{self.version}"
        if self.write_token is None:
            return head
        return f"{head}_{self.write_token}{'.cdc' if self.cdc else ''}"

    @classmethod
    def parse(cls, name: str) -> LogFile:
        """The log file called ``name``; :class:`InvalidArgumentError` if it is not one."""
        match = _LOG_RE.fullmatch(name)
        if match is None:
            raise InvalidArgumentError(f"{name!r} is not a Hudi log file name")
        file_id, instant, extension, version, token, cdc = match.groups()
        return cls(file_id, instant, int(version), token, extension, cdc is not None)

    def sort_key(self) -> tuple[str, int, str, bool]:
        """Hudi's log file order: base instant, version, write token (absent first), cdc last."""
        return (self.base_instant, self.version, self.write_token or "", self.cdc)


@dataclass(frozen=True)
class PendingLogFile:
    """A log file written ahead of its commit, a backfill's, under a temporary name that no
    reader takes for data: ``.memtier-tmp-<fileId>_<writeToken>_<nonce>.tmp``. The master
    names it :meth:`as_log` (slice and version) when the commit completes, so that log
    files end up in completion order; one a crash left goes as any temporary file."""

    file_id: str
    write_token: str
    nonce: str

    def __post_init__(self) -> None:
        _check(_FILE_ID_RE, self.file_id, "file id")
        _check(_TOKEN_RE, self.write_token, "write token")
        _check(re.compile(r"[0-9a-f]{32}"), self.nonce, "pending log file nonce")

    @classmethod
    def new(cls, file_id: str, write_token: str) -> PendingLogFile:
        """A fresh one (its nonce keeps the attempts of one task apart)."""
        return cls(file_id, write_token, uuid.uuid4().hex)

    @property
    def name(self) -> str:
        return f".memtier-tmp-{self.file_id}_{self.write_token}_{self.nonce}.tmp"

    @classmethod
    def parse(cls, name: str) -> PendingLogFile | None:
        """The pending log file called ``name``, or None for any other name."""
        match = _PENDING_RE.fullmatch(name)
        return None if match is None else cls(*match.groups())

    def as_log(self, base_instant: str, version: int) -> LogFile:
        """Its name once committed: a log file of the slice of ``base_instant``."""
        return LogFile(self.file_id, base_instant, version, self.write_token)


def classify(name: str) -> BaseFile | LogFile | None:
    """The data file called ``name``, or None for anything that is not a base or log file."""
    base = _BASE_RE.fullmatch(name)
    if base is not None:
        return BaseFile(*base.groups())
    if _LOG_RE.fullmatch(name) is not None:
        return LogFile.parse(name)
    return None


def bucket_file_id(bucket: int) -> str:
    """The file id of bucket ``bucket`` in a partition: ``%08d-0000-0000-0000-000000000000-0``.

    The fixed form Hudi 1.x uses for bucket-index file groups: every writer (a table
    server taking a bucket over, a batch write, a Hudi Spark writer looking buckets up by
    their first 8 digits) derives the same id, so none can create a second group.
    """
    if not isinstance(bucket, int) or isinstance(bucket, bool) or not 0 <= bucket <= 99_999_999:
        raise InvalidArgumentError(f"bucket must be an int in [0, 99999999], got {bucket!r}")
    return f"{bucket:08d}-0000-0000-0000-000000000000-0"


def new_bucket_file_id(bucket: int) -> str:
    """A fresh file id of ``bucket`` (for a file group that replaces the bucket's current
    one, e.g. by clustering): its eight digits, then the rest of a new UUID."""
    return f"{bucket_file_id(bucket)[:8]}{str(uuid.uuid4())[8:]}-0"


def bucket_of_file_id(file_id: str) -> int:
    """The bucket a bucket-index file id belongs to (its first 8 digits)."""
    head = file_id[:8]
    if len(head) != 8 or not head.isdigit():
        raise InvalidArgumentError(f"file id {file_id!r} is not a bucket-index file id")
    return int(head)


def bucket_or_none(file_id: str) -> int | None:
    """The bucket of a bucket-index file id; None for other file ids."""
    head = file_id[:8]
    return int(head) if len(head) == 8 and head.isdigit() else None
