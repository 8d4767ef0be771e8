"""What the master remembers of one table's recent instants, for optimistic conflict checks.

Every instant a writer puts on a table's timeline (a table server's flush, a Spark
backfill, a compaction, a clustering, a clean) is begun, planned and completed through
the master, which is the timeline's only writer. A :class:`CommitLog` records which file
groups each instant touches and in which order instants complete, so that a writer that
asks for it can be refused at completion time, as Hudi's optimistic concurrency control
refuses it: when another instant touched one of its file groups after it began (that
instant completed since, or is still pending and will complete later).

Pure bookkeeping, no I/O; it lives in the master's memory only. A restarted master rolls
every pending instant back (so none of them can complete), which is why losing this log
on a restart is safe: an instant it does not know can no longer complete.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field

from memtier.errors import CommitFailedError
from memtier.hudi.commit import WriteStat
from memtier.hudi.filenames import bucket_or_none
from memtier.hudi.timeline import Instant, Timeline

__all__ = [
    "BusyFileGroups", "CommitLog", "FileGroupRef", "TimelineMark", "can_conflict", "describe_write",
    "written_file_groups",
]

#: A file group: (partition path, file id).
FileGroupRef = tuple[str, str]
#: How many completed instants a log keeps for conflict checks; an instant that began
#: before the oldest of them is refused at a checked completion (it cannot be proven
#: free of conflicts). Flushes every few seconds keep ~10 hours.
_KEEP_COMPLETED = 10_000


#: Pairs of actions that never conflict on a file group: a compaction rewrites the slice
#: a log write saw, while the log write's file joins the next slice (Hudi's rule).
_COMPATIBLE = {frozenset({"deltacommit", "compaction"})}


def written_file_groups(stats: Iterable[WriteStat]) -> set[FileGroupRef]:
    """The file groups a commit's write stats name."""
    return {(s.partition_path, s.file_id) for s in stats}


def can_conflict(action: str, other: str) -> bool:
    """Whether two instants of these actions touching one file group conflict."""
    return frozenset({action, other}) not in _COMPATIBLE


@dataclass(frozen=True)
class TimelineMark:
    """The timeline when an instant began: its newest completed commit-type instant and
    the instants then pending (any of them may complete before this one)."""

    last_completed: str
    pending: frozenset[str]

    @classmethod
    def of(cls, timeline: Timeline) -> TimelineMark:
        last = timeline.last_completed()
        return cls(last.timestamp if last else "", frozenset(i.timestamp for i in timeline.pending(None)))

    def after(self, instant: Instant) -> bool:
        """Whether ``instant`` (now completed) completed after this mark was taken."""
        return instant.timestamp > self.last_completed or instant.timestamp in self.pending


class BusyFileGroups(Collection[FileGroupRef]):
    """File groups pending instants touch, as a table service's planner must leave them:
    those named, and every file group of a named one's bucket in its partition. A table
    server's flush names the file groups its blocks were written to, and writes into the
    one that holds their bucket now when a clustering replaced one of them; a compaction
    of that one planned meanwhile would leave the flush's log file out of its new slice
    (found by the chaos soak, issue 29: acknowledged writes read older versions)."""

    def __init__(self, named: Iterable[FileGroupRef]) -> None:
        self._named = frozenset(named)
        self._buckets = frozenset((p, b) for p, f in self._named if (b := bucket_or_none(f)) is not None)

    def __contains__(self, item: object) -> bool:
        if item in self._named:
            return True
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        partition, file_id = item
        bucket = bucket_or_none(file_id)
        return bucket is not None and (partition, bucket) in self._buckets

    def __iter__(self) -> Iterator[FileGroupRef]:
        return iter(self._named)

    def __len__(self) -> int:
        return len(self._named)


@dataclass
class _Pending:
    action: str
    owner: str
    began_after: int  # the completion sequence number when it began
    file_groups: set[FileGroupRef] = field(default_factory=set)
    life: str | None = None  # the life of the table server that began it, if one did
    heard: float | None = None  # when its writer last renewed its lease, if it holds one
    mark: TimelineMark | None = None  # the timeline when it began, for other writers' instants


@dataclass(frozen=True)
class _Completed:
    sequence: int
    instant: str
    action: str
    owner: str
    file_groups: frozenset[FileGroupRef]


class CommitLog:
    """Pending and recently completed instants of one table (not thread-safe: the master
    calls it under the table's lock; only :attr:`pending_log_writes`, replaced whole on
    every change, is read without it)."""

    def __init__(self) -> None:
        self._sequence = 0
        self._pending: dict[str, _Pending] = {}
        self._completed: list[_Completed] = []
        self._completed_here: set[str] = set()
        self._forgotten_upto = 0  # completions up to this sequence are no longer listed
        #: The times of the pending deltacommits (flushes, backfills), for readers that do
        #: not take the table's lock.
        self.pending_log_writes: frozenset[str] = frozenset()

    def begin(self, instant: str, action: str, owner: str, file_groups: Iterable[FileGroupRef] = (),
              life: str | None = None, leased_at: float | None = None, mark: TimelineMark | None = None) -> None:
        """Record a new pending instant (its requested file is on the timeline), begun by
        ``owner`` (living ``life``, for a table server); ``leased_at``: when its writer
        took a lease it renews (:meth:`renew`), for a writer outside the tier; ``mark``:
        the timeline as it began."""
        self._pending[instant] = _Pending(action, owner, self._sequence, set(file_groups), life, leased_at, mark)
        self._pending_changed()

    def began(self, instant: str) -> tuple[TimelineMark | None, set[FileGroupRef]]:
        """A pending instant's timeline mark and the file groups it touches so far."""
        self.pending(instant)
        return self._pending[instant].mark, set(self._pending[instant].file_groups)

    def completed_here(self, instant: str) -> bool:
        """Whether ``instant`` completed through this log (among those it still lists)."""
        return instant in self._completed_here

    def renew(self, instant: str, now: float) -> None:
        """The writer of a leased pending instant is alive at ``now``."""
        self.pending(instant)
        if self._pending[instant].heard is None:
            raise CommitFailedError(f"instant {instant} holds no lease to renew")
        self._pending[instant].heard = now

    def lapsed(self, now: float, lease_s: float, since: float) -> list[tuple[str, str, float]]:
        """Leased pending instants whose writer was not heard for ``lease_s`` (silence
        before ``since`` not counted): (instant, owner, seconds since it was heard)."""
        return [(instant, p.owner, now - p.heard) for instant, p in self._pending.items()
                if p.heard is not None and now - max(p.heard, since) > lease_s]

    def pending(self, instant: str) -> str:
        """The action of a pending instant; :class:`CommitFailedError` when it is not
        pending here (never begun through this master, already completed, rolled back,
        or begun before the master restarted)."""
        found = self._pending.get(instant)
        if found is None:
            raise CommitFailedError(
                f"instant {instant} is not pending on the master (it completed, was rolled back, "
                "or was begun before the master restarted); begin a new one"
            )
        return found.action

    def touch(self, instant: str, file_groups: Iterable[FileGroupRef]) -> None:
        """Add file groups a pending instant will write (known once it is planned)."""
        self.pending(instant)
        self._pending[instant].file_groups.update(file_groups)

    def conflicts(
        self, instant: str, file_groups: Iterable[FileGroupRef], actions: Collection[str] | None = None
    ) -> list[str]:
        """Descriptions of the instants that touched any of the file groups of
        ``instant`` (those known so far and ``file_groups``) since it began: completed
        after it began, or pending besides it. Only instants of ``actions`` count (None:
        any), and never a pair that cannot conflict (:func:`can_conflict`)."""
        me = self._pending[instant]
        mine = me.file_groups | set(file_groups)

        def counts(action: str) -> bool:
            return (actions is None or action in actions) and can_conflict(me.action, action)

        found = []
        if me.began_after < self._forgotten_upto:
            found.append(f"{self._forgotten_upto - me.began_after} instants completed since {instant} "
                         "began that the master no longer remembers")
        for done in self._completed:
            if done.sequence > me.began_after and done.file_groups & mine and counts(done.action):
                found.append(describe_write(done.instant, done.action, done.owner, done.file_groups & mine))
        for other, pending in self._pending.items():
            if other != instant and pending.file_groups & mine and counts(pending.action):
                found.append(describe_write(other, pending.action, pending.owner, pending.file_groups & mine)
                             + " (pending)")
        return found

    def completed_since(
        self, instant: str, file_groups: Iterable[FileGroupRef], actions: Collection[str]
    ) -> dict[FileGroupRef, list[str]]:
        """The file groups among ``file_groups`` that instants of ``actions`` completed
        into since the pending ``instant`` began, each with descriptions of those instants
        (all of ``file_groups`` when the master no longer remembers every completion since)."""
        me = self._pending[instant]
        wanted = set(file_groups)
        if me.began_after < self._forgotten_upto:
            return {g: [f"instants completed since {instant} began that the master no longer remembers"]
                    for g in wanted}
        found: dict[FileGroupRef, list[str]] = {}
        for done in self._completed:
            if done.sequence > me.began_after and done.action in actions:
                for group in done.file_groups & wanted:
                    found.setdefault(group, []).append(describe_write(done.instant, done.action, done.owner, [group]))
        return found

    def pending_file_groups(self) -> BusyFileGroups:
        """File groups some pending instant touches (or will)."""
        return BusyFileGroups(g for pending in self._pending.values() for g in pending.file_groups)

    def _pending_changed(self) -> None:
        self.pending_log_writes = frozenset(i for i, p in self._pending.items() if p.action == "deltacommit")

    def begun_by(self, life: str) -> list[str]:
        """Pending instants a table server's ``life`` began."""
        return [instant for instant, pending in self._pending.items() if pending.life == life]

    def pending_instants(self) -> dict[str, str]:
        """Pending instants and their actions."""
        return {instant: pending.action for instant, pending in self._pending.items()}

    def complete(self, instant: str, file_groups: Iterable[FileGroupRef] = ()) -> None:
        """The instant completed: later checks of instants begun before now see it."""
        pending = self._pending.pop(instant)
        self._pending_changed()
        self._sequence += 1
        touched = frozenset(pending.file_groups | set(file_groups))
        self._completed.append(_Completed(self._sequence, instant, pending.action, pending.owner, touched))
        self._completed_here.add(instant)
        if len(self._completed) > _KEEP_COMPLETED:
            dropped = self._completed[: len(self._completed) - _KEEP_COMPLETED]
            self._completed_here.difference_update(d.instant for d in dropped)
            self._forgotten_upto = dropped[-1].sequence
            del self._completed[: len(dropped)]

    def forget(self, instant: str) -> None:
        """The instant was rolled back (or never got further than requested)."""
        self._pending.pop(instant, None)
        self._pending_changed()


def describe_write(instant: str, action: str, owner: str, file_groups: Iterable[FileGroupRef]) -> str:
    """An instant that wrote file groups, for a conflict report."""
    groups = sorted(file_groups)
    shown = ", ".join(f"{p or '<root>'}/{f}" for p, f in groups[:3])
    more = f" and {len(groups) - 3} more" if len(groups) > 3 else ""
    return f"{action} {instant} by {owner} wrote file groups {shown}{more}"
