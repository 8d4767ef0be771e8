"""Manual table-service requests: what a compaction request covers (the newest log file
of each slice when it was made) and when a file group counts as compacted; how a request
reports its tasks, and the line ``memtier compact`` shows for it."""

from __future__ import annotations

from memtier.cli_format import request_line
from memtier.hudi.filenames import BaseFile, LogFile
from memtier.hudi.fsview import FileGroup, FileSlice, FileSystemView
from memtier.master.requests import Request, compacted, compaction_targets
from memtier.master.tasks import TaskQueue

GROUP = ("p", "00000000-0000-0000-0000-000000000000-0")
T1, T2, T3 = "20260101000000001", "20260101000000002", "20260101000000003"


def _slice(base: str | None, instant: str, logs: int) -> FileSlice:
    file_id = GROUP[1]
    return FileSlice("p", file_id, instant, BaseFile(file_id, "0-0-0", base) if base else None,
                     tuple(LogFile(file_id, instant, v, "0-0-0") for v in range(1, logs + 1)))


def _view(*slices: FileSlice, replaced: bool = False) -> FileSystemView:
    groups = {GROUP: FileGroup(*GROUP, slices)}
    return FileSystemView("/t", None, groups, replaced={GROUP: T3} if replaced else {})


def test_a_request_covers_each_slice_with_log_files_by_its_newest_logs_base_instant() -> None:
    assert compaction_targets(_view(_slice(T1, T1, 2))) == {GROUP: T1}
    assert compaction_targets(_view(_slice(T1, T1, 0))) == {}


def test_a_file_group_is_compacted_once_it_has_a_completed_base_file_newer_than_those_logs() -> None:
    assert not compacted(_view(_slice(T1, T1, 2)), GROUP, T1)
    assert compacted(_view(_slice(T1, T1, 2), _slice(T2, T2, 1)), GROUP, T1)  # logs since stay for later
    assert not compacted(_view(_slice(T1, T1, 2), _slice(T2, T2, 1)), GROUP, T2)
    assert compacted(_view(_slice(T1, T1, 2), replaced=True), GROUP, T1)  # a clustering rewrote it
    assert compacted(FileSystemView("/t", None, {}), GROUP, T1)  # gone


def test_a_request_reports_its_tasks_and_which_it_joined() -> None:
    queue = TaskQueue()
    pending = queue.add("t", "compaction", T1, 1, 0.0, file_groups=3)
    own = queue.add("t", "compaction", T2, 1, 0.0, file_groups=1)
    assert queue.of_instant("t", T1) is pending and queue.of_instant("t", T3) is None
    request = Request(7, "t", "compaction", file_groups={GROUP: T1})
    request.add(pending, joined=True)
    request.add(own, joined=False)
    request.add(pending, joined=False)  # added once
    shown = request.to_dict({pending.task_id: pending, own.task_id: own})
    assert [(t["instant"], t["joined"]) for t in shown["tasks"]] == [(T1, True), (T2, False)]
    assert (shown["state"], shown["file_groups"]) == ("running", 1)
    queue.take("svc-0", 0.0, 10.0)
    line = request_line(request.to_dict({pending.task_id: pending, own.task_id: own}))
    assert line == f"compaction {T1} running (svc-0) (joined); 0/2 tasks done (1 joined)"
    queue.finish(pending.task_id)
    queue.finish(own.task_id)
    request.complete()
    assert request_line(request.to_dict({pending.task_id: pending, own.task_id: own})) == \
        "compaction completed; 2/2 tasks done (1 joined)"


def test_a_request_waiting_for_writes_says_so() -> None:
    shown = Request(1, "t", "compaction", file_groups={GROUP: T1}).to_dict({})
    assert request_line(shown) == "compaction waiting for writes in progress to end; 0/0 tasks done"
