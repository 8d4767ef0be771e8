"""The Hudi timeline: instants, loading it and writing it (layouts 1 and 2).

Layout 1 (table version 6) keeps every instant file in ``.hoodie/``; layout 2 (versions 8
and 9) in ``.hoodie/timeline/``, with completed instants named ``<t>_<completion>.<action>``
(the completion time is taken when the instant completes, from a clock that never repeats
a time in this process).
States are ``<t>.<action>.requested`` -> ``<t>.<action>.inflight`` -> completed, except
that an inflight COW ``commit`` is ``<t>.inflight``. A loaded timeline keeps one instant
per (time, action) in its latest state, like Hudi's layout-1 filter; a compaction or
clustering that completed shows as its ``commit`` / ``replacecommit``.

Rollback protocol (:meth:`TimelineWriter.rollback`), resumable after a crash at any step
by :meth:`TimelineWriter.resume_rollback` on the pending rollback instant:

1. ``<t>.rollback.requested`` holds the plan (target instant, data files to delete);
2. the data files are deleted (a file already gone is fine);
3. the target's requested/inflight files are deleted (a compaction's inflight only: it
   goes back to requested, to be executed again);
4. ``<t>.rollback.inflight`` (empty) is created unless present;
5. ``<t>.rollback`` (Avro ``HoodieRollbackMetadata``) is created: the rollback is done.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from functools import cached_property, lru_cache, total_ordering

from memtier.errors import (
    AlreadyExistsError,
    CorruptFileError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedTableError,
)
from memtier.hudi.commit import CommitMetadata, RollbackMetadata, RollbackPlan
from memtier.io import FileIO, join, relpath

__all__ = [
    "COMMIT_ACTIONS",
    "RE_EXECUTED",
    "REPLACING_ACTIONS",
    "Instant",
    "State",
    "Timeline",
    "TimelineWriter",
    "new_completion_time",
    "new_instant_time",
    "parse_instant_time",
    "timeline_dir",
    "utc_now",
]

#: Actions whose completion makes data visible.
COMMIT_ACTIONS = ("commit", "deltacommit", "replacecommit")
#: Actions of instants that replace file groups while pending: an insert overwrite or a
#: clustering (``replacecommit`` on layout 1), a clustering from layout 2 on.
REPLACING_ACTIONS = ("replacecommit", "clustering")
ROLLBACK = "rollback"
#: Actions whose rollback returns them to requested, as Hudi does: a compaction plan is
#: never dropped (log files written after it was requested already belong to its slice).
RE_EXECUTED = ("compaction",)

# Pending actions that complete under another name (Hudi's "comparable action").
_COMPLETES_AS = {
    "compaction": "commit",
    "logcompaction": "deltacommit",
    "clustering": "replacecommit",
}
_LAYOUTS = (1, 2)
_TIME_RE = re.compile(r"\d{14}(?:\d{3})?", re.ASCII)
_ACTION = r"[a-z]+"
_PENDING_RE = re.compile(rf"(\d{{14,}})\.({_ACTION})\.(requested|inflight)", re.ASCII)
_COMMIT_INFLIGHT_RE = re.compile(r"(\d{14,})\.inflight", re.ASCII)
_STATE_WORDS = ("requested", "inflight")
_COMPLETED_RE = {
    1: re.compile(rf"(\d{{14,}})()\.({_ACTION})", re.ASCII),
    2: re.compile(rf"(\d{{14,}})(?:_(\d{{14,}}))?\.({_ACTION})", re.ASCII),
}


@total_ordering
class State(Enum):
    """Where an instant is in its life; ordered REQUESTED < INFLIGHT < COMPLETED."""

    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        order = list(State)
        return order.index(self) < order.index(other)


@total_ordering
@dataclass(frozen=True)
class Instant:
    """One action at one instant time, in one state.

    Ordered by (timestamp, state, action), so the files of one instant sort in the order
    they were written. ``completion_time`` (layout 2 only) does not take part in equality.
    """

    timestamp: str
    action: str
    state: State
    completion_time: str | None = field(default=None, compare=False)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Instant):
            return NotImplemented
        return self._key() < other._key()

    def _key(self) -> tuple[str, State, str]:
        return (self.timestamp, self.state, self.action)

    @property
    def completes_as(self) -> str:
        """The action of this instant once completed (a compaction completes as ``commit``)."""
        return _COMPLETES_AS.get(self.action, self.action)

    @classmethod
    def parse(cls, file_name: str, layout: int) -> Instant | None:
        """The instant a timeline file stands for, or None for any other file."""
        _check_layout(layout)
        if match := _PENDING_RE.fullmatch(file_name):
            timestamp, action, state = match.groups()
            return cls(timestamp, action, State(state))
        if match := _COMMIT_INFLIGHT_RE.fullmatch(file_name):
            return cls(match.group(1), "commit", State.INFLIGHT)
        match = _COMPLETED_RE[layout].fullmatch(file_name)
        if match is None or match.group(3) in _STATE_WORDS:
            return None
        timestamp, completion, action = match.groups()
        return cls(timestamp, action, State.COMPLETED, completion or None)

    def file_name(self, layout: int) -> str:
        """The timeline file of this instant under ``layout`` (1 or 2)."""
        _check_layout(layout)
        if self.state is State.REQUESTED:
            return f"{self.timestamp}.{self.action}.requested"
        if self.state is State.INFLIGHT:
            if self.action == "commit":
                return f"{self.timestamp}.inflight"
            return f"{self.timestamp}.{self.action}.inflight"
        if layout == 1:
            return f"{self.timestamp}.{self.action}"
        if self.completion_time is None:
            raise InvalidArgumentError(
                f"completed instant {self} needs a completion time on layout 2"
            )
        return f"{self.timestamp}_{self.completion_time}.{self.action}"

    def with_state(self, state: State) -> Instant:
        """The same instant in ``state`` (the action a compaction completes as, once done)."""
        action = self.completes_as if state is State.COMPLETED else self.action
        return Instant(self.timestamp, action, state)

    def __str__(self) -> str:
        return f"{self.timestamp}.{self.action}[{self.state.value}]"


def _check_layout(layout: int) -> None:
    if layout not in _LAYOUTS:
        raise UnsupportedTableError(f"timeline layout version {layout} is not supported (1 or 2)")


def timeline_dir(base_path: str, layout: int) -> str:
    """The folder holding the instant files of the table at ``base_path``."""
    _check_layout(layout)
    return join(base_path, ".hoodie") if layout == 1 else join(base_path, ".hoodie", "timeline")


def _latest_states(instants: Sequence[Instant]) -> tuple[Instant, ...]:
    """One instant per (timestamp, completed action): the one in the latest state."""
    latest: dict[tuple[str, str], Instant] = {}
    for instant in instants:
        key = (instant.timestamp, instant.completes_as)
        if key not in latest or latest[key].state < instant.state:
            latest[key] = instant
    return tuple(sorted(latest.values()))


@lru_cache(maxsize=4096)
def _parsed(file_name: str, layout: int) -> Instant | None:
    """:meth:`Instant.parse`, once per name (a reader lists the same timeline files at
    every read; an instant is an immutable value)."""
    return Instant.parse(file_name, layout)


def _matches(instant: Instant, actions: Collection[str] | None) -> bool:
    return actions is None or instant.action in actions


@dataclass(frozen=True)
class Timeline:
    """The active timeline: one instant per action and time, latest state, sorted.

    ``starts``: the time of its oldest instant as listed. Instants before it were archived
    by a Hudi writer (``.hoodie/archived``, ``.hoodie/timeline/history``), all completed:
    their files count as committed, as Hudi's ``containsOrBeforeTimelineStarts`` has it.
    """

    layout_version: int
    instants: tuple[Instant, ...]
    starts: str | None = None

    @classmethod
    def load(cls, io: FileIO, base_path: str, layout_version: int) -> Timeline:
        """List the timeline folder; files and folders that are not instants are ignored."""
        found = (
            _parsed(entry.name, layout_version)
            for entry in io.list_dir(timeline_dir(base_path, layout_version))
            if not entry.is_dir
        )
        instants = _latest_states([i for i in found if i is not None])
        return cls(layout_version, instants, instants[0].timestamp if instants else None)

    def completed(self, actions: Collection[str] | None = COMMIT_ACTIONS) -> tuple[Instant, ...]:
        """Completed instants of ``actions`` (None: any action), oldest first."""
        if actions is COMMIT_ACTIONS:
            return self._completed_commits
        return tuple(
            i for i in self.instants if i.state is State.COMPLETED and _matches(i, actions)
        )

    @cached_property
    def _completed_commits(self) -> tuple[Instant, ...]:
        """Completed commit-type instants (readers ask per file slice and log block)."""
        return tuple(i for i in self.instants if i.state is State.COMPLETED and _matches(i, COMMIT_ACTIONS))

    def pending(self, actions: Collection[str] | None = COMMIT_ACTIONS) -> tuple[Instant, ...]:
        """Requested or inflight instants of ``actions`` (None: any action), oldest first."""
        return tuple(
            i for i in self.instants if i.state is not State.COMPLETED and _matches(i, actions)
        )

    def is_completed(self, timestamp: str) -> bool:
        """True when a commit-type instant at ``timestamp`` has completed (archived, when
        older than the timeline's start)."""
        return timestamp in self._completed_times or (self.starts is not None and timestamp < self.starts)

    @cached_property
    def _completed_times(self) -> frozenset[str]:
        """The times of completed commit-type instants (a reader asks once per log block)."""
        return frozenset(i.timestamp for i in self._completed_commits)

    def with_pending(self, timestamps: Collection[str]) -> Timeline:
        """This timeline with the deltacommits at ``timestamps`` in flight, completed or
        not: as a reader that saw them pending reads it."""
        if not timestamps:
            return self
        wanted = set(timestamps)
        return Timeline(self.layout_version, tuple(
            Instant(i.timestamp, i.action, State.INFLIGHT)
            if i.timestamp in wanted and i.action == "deltacommit" and i.state is State.COMPLETED else i
            for i in self.instants
        ), self.starts)

    def last_completed(self) -> Instant | None:
        """The newest completed commit-type instant."""
        done = self.completed()
        return done[-1] if done else None

    def last_timestamp(self) -> str | None:
        """The newest instant time on the timeline, in any state and of any action."""
        return self.instants[-1].timestamp if self.instants else None

    def completed_as_of(self, timestamp: str) -> Timeline:
        """Completed instants (any action) of instant time <= ``timestamp``, for time travel.

        On both layouts, as Apache Hudi 1.0's ``as.of.instant`` reads a version 8 table: an
        instant requested before ``timestamp`` counts even when it completed after it.
        """
        return Timeline(
            self.layout_version,
            tuple(i for i in self.instants if i.state is State.COMPLETED and i.timestamp <= timestamp),
            self.starts,
        )

    def instant_path(self, base_path: str, instant: Instant) -> str:
        """Where ``instant``'s file of the table at ``base_path`` lives."""
        folder = timeline_dir(base_path, self.layout_version)
        return join(folder, instant.file_name(self.layout_version))

    def read_commit_metadata(self, io: FileIO, base_path: str, instant: Instant) -> CommitMetadata:
        """The commit metadata in ``instant``'s file (JSON or Avro, by content)."""
        path = self.instant_path(base_path, instant)
        data = io.read_bytes(path)
        try:
            return CommitMetadata.decode(data)
        except InvalidArgumentError as e:
            raise CorruptFileError(path, 0, str(e)) from e


# ======================================================================================
# Instant times
# ======================================================================================


def utc_now() -> datetime:
    return datetime.now(UTC)


def _format_time(moment: datetime) -> str:
    return f"{moment:%Y%m%d%H%M%S}{moment.microsecond // 1000:03d}"


def parse_instant_time(timestamp: str) -> datetime:
    """The UTC moment of a ``yyyyMMddHHmmss[SSS]`` instant time."""
    if not isinstance(timestamp, str) or not _TIME_RE.fullmatch(timestamp):
        raise InvalidArgumentError(
            f"instant time {timestamp!r} is not yyyyMMddHHmmss or yyyyMMddHHmmssSSS"
        )
    try:
        moment = datetime.strptime(timestamp[:14], "%Y%m%d%H%M%S")
    except ValueError as e:
        raise InvalidArgumentError(f"instant time {timestamp!r} is not a valid date: {e}") from e
    millis = int(timestamp[14:] or 0)
    return moment.replace(microsecond=millis * 1000, tzinfo=UTC)


_completion_lock = threading.Lock()
_last_completion = ""


def new_completion_time(requested: str, now: Callable[[], datetime] = utc_now) -> str:
    """A completion time for an instant requested at ``requested``: after it, and after
    every completion time this process gave out before (two instants completing in one
    millisecond get distinct times, as Hudi's generator gives them)."""
    global _last_completion
    with _completion_lock:
        _last_completion = new_instant_time(max(requested, _last_completion), now)
        return _last_completion


def new_instant_time(after: str | None, now: Callable[[], datetime] = utc_now) -> str:
    """A UTC ``yyyyMMddHHmmssSSS`` time strictly after ``after`` (1 ms later if the clock lags)."""
    moment = now()
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    candidate = _format_time(moment.astimezone(UTC))
    if after is None or candidate > after:
        return candidate
    return _format_time(parse_instant_time(after) + timedelta(milliseconds=1))


# ======================================================================================
# Writing
# ======================================================================================


class TimelineWriter:
    """Creates the instant files of a timeline of ``layout`` 1 or 2, each with
    ``create_exclusive``.

    :class:`AlreadyExistsError` from any method means another writer already wrote that
    file (took the instant, or completed it); nothing of this call became visible. On
    layout 2 a completed instant's name carries its completion time, so completing checks
    first that no completed file of the instant exists (the master is the timeline's only
    writer, so nothing completes the same instant between the check and the create).
    """

    def __init__(self, io: FileIO, base_path: str, layout: int = 1,
                 before_complete: Callable[[Instant, bytes], None] | None = None) -> None:
        _check_layout(layout)
        self.before_complete = before_complete
        self.io = io
        self.base_path = base_path
        self.layout = layout
        self.folder = timeline_dir(base_path, layout)

    def _path(self, instant: Instant) -> str:
        return join(self.folder, instant.file_name(self.layout))

    def _create(self, instant: Instant, content: bytes) -> Instant:
        self.io.create_exclusive(self._path(instant), content)
        return instant

    def _completed(self, instant: Instant, listed: Timeline | None = None) -> Instant | None:
        """The completed file's instant of ``instant`` (any state of it), if one exists
        (in ``listed``, a listing of this timeline, when given)."""
        done = instant.with_state(State.COMPLETED)
        if listed is not None:
            return next((i for i in listed.instants if i.state is State.COMPLETED
                         and (i.timestamp, i.action) == (done.timestamp, done.action)), None)
        if self.layout == 1:
            return done if self.io.exists(self._path(done)) else None
        prefix, suffix = f"{done.timestamp}_", f".{done.action}"
        for entry in self.io.list_dir(self.folder):
            if entry.name.startswith(prefix) and entry.name.endswith(suffix):
                return Instant.parse(entry.name, self.layout)
        return None

    def _create_completed(self, instant: Instant, content: bytes, listed: Timeline | None = None) -> Instant:
        """Create the completed file of ``instant`` (given in any state), after
        ``before_complete`` (which brings Hudi's metadata table up to it)."""
        done = instant.with_state(State.COMPLETED)
        if self.layout == 2 and self._completed(done, listed) is not None:
            raise AlreadyExistsError(f"instant {done.timestamp}.{done.action} of {self.base_path} has completed")
        if self.before_complete is not None:
            self.before_complete(instant, content)
        if self.layout == 1:
            return self._create(done, content)
        done = Instant(done.timestamp, done.action, State.COMPLETED, new_completion_time(done.timestamp))
        return self._create(done, content)

    def request(self, timestamp: str, action: str, content: bytes = b"") -> Instant:
        """Write ``<t>.<action>.requested``."""
        self._check_action(timestamp, action)
        return self._create(Instant(timestamp, action, State.REQUESTED), content)

    @staticmethod
    def _check_action(timestamp: str, action: str) -> None:
        parse_instant_time(timestamp)
        if not re.fullmatch(_ACTION, action):
            raise InvalidArgumentError(f"timeline action {action!r} must be lower-case letters")

    def inflight(self, instant: Instant, content: bytes = b"") -> Instant:
        """Move a requested instant to inflight (``<t>.<action>.inflight``, ``<t>.inflight``)."""
        _require_state(instant, State.REQUESTED, "move to inflight")
        return self._create(instant.with_state(State.INFLIGHT), content)

    def start(self, timestamp: str, action: str) -> Instant:
        """Request an instant and move it to inflight at once, both files empty; the
        inflight instant. Neither file is synced on its own (``write_marker``); one sync
        of the timeline folder after both makes both durable before this returns (on a
        local disk 1 sync instead of the 4 of :meth:`request` and :meth:`inflight`).

        A crash before that sync returns may lose either file or both: the instant is
        then never begun, requested, inflight, or (where the file system does not keep
        the order of creations in one folder; ext4's and XFS's journals do) inflight
        without its requested file, a pending instant like the others that a rollback
        deletes by listing. Nothing else of the instant may be written before this
        returns, so no later file of it outlives a crash that loses these two."""
        self._check_action(timestamp, action)
        requested = Instant(timestamp, action, State.REQUESTED)
        for instant in (requested, requested.with_state(State.INFLIGHT)):
            self.io.write_marker(self._path(instant), b"", exclusive=True)
        self.io.sync_dir(self.folder)
        return requested.with_state(State.INFLIGHT)

    def replace_inflight(self, instant: Instant, content: bytes) -> None:
        """Rewrite an inflight instant's content (the files a rollback deletes), atomically."""
        _require_state(instant, State.INFLIGHT, "rewrite")
        self.io.write_atomic(self._path(instant), content)

    def complete(self, instant: Instant, content: bytes, listed: Timeline | None = None) -> Instant:
        """Complete an inflight instant: its data becomes visible once this file exists.
        ``listed``: a listing of this timeline taken since the instant was requested, which
        then stands in for the listing that checks it has not completed (layout 2)."""
        _require_state(instant, State.INFLIGHT, "complete")
        return self._create_completed(instant, content, listed)

    def remove_pending(self, instant: Instant) -> None:
        """Delete the requested and inflight files of an instant that never completed."""
        if self._completed(instant) is not None:
            raise InvalidArgumentError(
                f"instant {instant.timestamp}.{instant.completes_as} has completed;"
                " its pending files stay"
            )
        self.io.delete(self._path(instant.with_state(State.INFLIGHT)))
        self.io.delete(self._path(instant.with_state(State.REQUESTED)))

    def rollback(
        self, target: Instant, deleted_files: Mapping[str, Sequence[str]], timestamp: str
    ) -> Instant:
        """Roll back the pending ``target``: record the plan, delete ``deleted_files``
        (partition path -> file names), drop the target's files, complete the rollback."""
        if target.state is State.COMPLETED:
            raise InvalidArgumentError(f"cannot roll back completed instant {target}")
        paths = {
            partition: tuple(join(self.base_path, partition, name) for name in names)
            for partition, names in deleted_files.items()
        }
        plan = RollbackPlan(target.timestamp, target.action, paths)
        requested = self.request(timestamp, ROLLBACK, plan.to_avro())
        return self.resume_rollback(requested)

    def resume_rollback(self, rollback: Instant) -> Instant:
        """Finish a pending rollback from its recorded plan (steps 2-5; each is idempotent)."""
        if rollback.action != ROLLBACK or rollback.state is State.COMPLETED:
            raise InvalidArgumentError(f"{rollback} is not a pending rollback")
        requested_path = self._path(rollback.with_state(State.REQUESTED))
        try:
            plan = RollbackPlan.from_avro(self.io.read_bytes(requested_path))
        except InvalidArgumentError as e:
            raise CorruptFileError(requested_path, 0, str(e)) from e
        except NotFoundError as e:
            raise InvalidArgumentError(f"rollback {rollback.timestamp} has no plan: {e}") from e
        for paths in plan.files_to_delete.values():
            for path in paths:
                try:
                    relpath(self.base_path, path)
                except InvalidArgumentError as e:
                    raise CorruptFileError(requested_path, 0, f"plan deletes {e}") from e
                self.io.delete(path)
        target = Instant(plan.target_timestamp, plan.target_action, State.REQUESTED)
        if target.action in RE_EXECUTED:  # back to requested: the plan is executed again
            self.io.delete(self._path(target.with_state(State.INFLIGHT)))
        else:
            self.remove_pending(target)
        inflight = rollback.with_state(State.INFLIGHT)
        if not self.io.exists(self._path(inflight)):
            self._create(inflight, b"")
        metadata = RollbackMetadata(
            rollback.timestamp, plan.target_timestamp, plan.target_action, plan.files_to_delete
        )
        return self._create_completed(rollback, metadata.to_avro())


def _require_state(instant: Instant, state: State, what: str) -> None:
    if instant.state is not state:
        raise InvalidArgumentError(
            f"can only {what} an instant in state {state.value}, not {instant}"
        )
