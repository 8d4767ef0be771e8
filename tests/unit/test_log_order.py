"""Log files in completion order: where a log write's files go when it completes
(:mod:`memtier.hudi.logorder`), and the master's record of which log writes completed
into a file group since another began."""

from __future__ import annotations

from memtier.hudi.commit import WriteStat
from memtier.hudi.filenames import BaseFile, LogFile, PendingLogFile
from memtier.hudi.fsview import FileGroup, FileSlice, FileSystemView
from memtier.hudi.logorder import place_log_files
from memtier.master.commits import CommitLog

FILE_ID = "00000001-0000-0000-0000-000000000000-0"
GROUP = ("p", FILE_ID)
BASE, COMPACTION, MINE = "20260101000000001", "20260101000000005", "20260101000000003"


def _log(version: int, token: str = "0-0-0", base: str = BASE) -> LogFile:
    return LogFile(FILE_ID, base, version, token)


def _view(*logs: LogFile, compaction: tuple[LogFile, ...] | None = None) -> FileSystemView:
    slice_ = FileSlice("p", FILE_ID, BASE, BaseFile(FILE_ID, "0-0-0", BASE), logs)
    return FileSystemView("/t", None, {GROUP: FileGroup(*GROUP, (slice_,))},
                          pending_compaction={GROUP: COMPACTION} if compaction is not None else {},
                          pending_logs={GROUP: compaction} if compaction else {})


def _stat(name: str, log_version: int | None = None, file_id: str = FILE_ID) -> WriteStat:
    return WriteStat(file_id=file_id, path=f"p/{name}", partition_path="p", prev_commit="null", num_writes=3,
                     num_inserts=0, num_update_writes=3, num_deletes=0, total_write_bytes=9, file_size=9,
                     log_version=log_version)


def _pending(token: str = "2-1-9", file_id: str = FILE_ID) -> str:
    return PendingLogFile.new(file_id, token).name


def test_a_pending_log_file_goes_after_every_log_file_of_the_slice_listed_or_planned() -> None:
    name = _pending()
    placed, renames = place_log_files(_view(_log(1), _log(2)), [_stat(name)], MINE,
                                      planned={GROUP: [_log(3)]}, reorder=())
    [stat] = placed
    assert (stat.path, stat.log_version, stat.log_files) == (f"p/{_log(4, '2-1-9').name}", 4, (_log(4, "2-1-9").name,))
    assert (stat.prev_commit, stat.base_file, stat.num_writes) == (BASE, BaseFile(FILE_ID, "0-0-0", BASE).name, 3)
    assert [(r.partition, r.old, r.new) for r in renames] == [("p", name, _log(4, "2-1-9").name)]


def test_a_pending_log_file_joins_the_slice_a_pending_compaction_opens() -> None:
    placed, _ = place_log_files(_view(_log(1), compaction=(_log(1, base=COMPACTION),)), [_stat(_pending())], MINE,
                                planned={}, reorder=())
    assert LogFile.parse(placed[0].path.split("/")[1]) == _log(2, "2-1-9", base=COMPACTION)


def test_a_pending_log_file_of_a_file_group_no_one_wrote_yet_starts_it_log_only() -> None:
    other = "00000002-0000-0000-0000-000000000000-0"
    placed, _ = place_log_files(_view(), [_stat(_pending(file_id=other), file_id=other)], MINE,
                                planned={}, reorder=())
    assert placed[0].path == f"p/{LogFile(other, MINE, 1, '2-1-9').name}"
    assert (placed[0].prev_commit, placed[0].base_file) == ("null", None)


def test_several_tasks_pending_files_in_one_file_group_each_get_a_version() -> None:
    placed, _ = place_log_files(_view(_log(1)), [_stat(_pending("0-1-5")), _stat(_pending("1-1-6"))], MINE,
                                planned={}, reorder=())
    assert sorted(s.log_version for s in placed) == [2, 3]


def test_a_planned_log_file_overtaken_by_one_completed_since_moves_up() -> None:
    mine = _log(3)
    stat = _stat(mine.name, log_version=3)
    overtaken = _view(_log(1), _log(2), mine, _log(3, "0-2-7"))  # a backfill completed at version 3 too
    placed, renames = place_log_files(overtaken, [stat], MINE, planned={}, reorder=[GROUP])
    assert placed[0].log_version == 4 and placed[0].path == f"p/{_log(4).name}"
    assert [(r.old, r.new) for r in renames] == [(mine.name, _log(4).name)]
    ahead = _view(_log(1), _log(2, "0-2-7"), mine)  # what completed since is below it: it stays
    assert place_log_files(ahead, [stat], MINE, planned={}, reorder=[GROUP]) == ([stat], [])
    pending_above = _view(_log(1), mine, _log(4))  # above it, but not completed: it stays
    assert place_log_files(pending_above, [stat], MINE, planned={GROUP: [_log(4)]}, reorder=[GROUP]) == ([stat], [])
    assert place_log_files(overtaken, [stat], MINE, planned={}, reorder=()) == ([stat], [])  # none completed since


def test_the_commit_log_says_which_file_groups_log_writes_completed_into_since_one_began() -> None:
    log = CommitLog()
    log.begin("001", "deltacommit", "ts-0", [("p", "a"), ("p", "b")])
    log.begin("002", "deltacommit", "backfill", [])
    log.begin("003", "compaction", "table-services", [("p", "a")])
    log.complete("001")
    log.complete("003")
    assert log.completed_since("002", [("p", "a"), ("p", "c")], ("deltacommit",)) == {
        ("p", "a"): ["deltacommit 001 by ts-0 wrote file groups p/a"]}
    log.begin("004", "deltacommit", "ts-0", [("p", "a")])
    assert log.completed_since("004", [("p", "a")], ("deltacommit",)) == {}
