"""The timeline: instant file names, loading (layouts 1 and 2), instant times, writing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from memtier.errors import (
    AlreadyExistsError,
    CorruptFileError,
    InvalidArgumentError,
    UnsupportedTableError,
)
from memtier.hudi.commit import CommitMetadata, RollbackMetadata, RollbackPlan
from memtier.hudi.properties import TableConfig, load_table_config, write_table_config
from memtier.hudi.timeline import (
    COMMIT_ACTIONS,
    Instant,
    State,
    Timeline,
    TimelineWriter,
    new_instant_time,
    parse_instant_time,
    timeline_dir,
)
from memtier.io import FileIO, join, open_fileio
from tests.support.samples import SAMPLES, Sample, unpack

T1, T2, T3, T4, T5 = (f"2025010100000000{n}" for n in range(5))

# --- instant file names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "layout", "instant"),
    [
        (f"{T1}.deltacommit.requested", 1, Instant(T1, "deltacommit", State.REQUESTED)),
        (f"{T1}.deltacommit.inflight", 1, Instant(T1, "deltacommit", State.INFLIGHT)),
        (f"{T1}.deltacommit", 1, Instant(T1, "deltacommit", State.COMPLETED)),
        (f"{T1}.commit.requested", 1, Instant(T1, "commit", State.REQUESTED)),
        (f"{T1}.inflight", 1, Instant(T1, "commit", State.INFLIGHT)),
        (f"{T1}.commit", 1, Instant(T1, "commit", State.COMPLETED)),
        (f"{T1}.rollback", 1, Instant(T1, "rollback", State.COMPLETED)),
        ("20240103153000.commit", 1, Instant("20240103153000", "commit", State.COMPLETED)),
        (f"{T1}.inflight", 2, Instant(T1, "commit", State.INFLIGHT)),
        (f"{T1}.clustering.requested", 2, Instant(T1, "clustering", State.REQUESTED)),
        (f"{T1}_{T3}.replacecommit", 2, Instant(T1, "replacecommit", State.COMPLETED, T3)),
    ],
)
def test_instant_file_names_round_trip(name: str, layout: int, instant: Instant) -> None:
    parsed = Instant.parse(name, layout)
    assert parsed == instant
    assert parsed is not None and parsed.completion_time == instant.completion_time
    assert instant.file_name(layout) == name


@pytest.mark.parametrize(
    "name",
    [
        "hoodie.properties",
        "hoodie.properties.backup",
        "archived",
        ".aux",
        ".temp",
        "metadata",
        "history",
        f".{T1}.commit.crc",
        f"{T1}.commit.crc",
        f"{T1}.deltacommit.done",
        f"{T1}_{T2}.commit.requested",
        f"{T1}.requested",
        f"{T1}_{T2}.inflight",
        "2025.commit",
        f"{T1}.Commit",
        ".memtier-tmp-0a1b-" + f"{T1}.deltacommit",
    ],
)
def test_other_files_are_not_instants(name: str) -> None:
    assert Instant.parse(name, 1) is None
    assert Instant.parse(name, 2) is None


def test_completion_times_are_layout_2_only() -> None:
    assert Instant.parse(f"{T1}_{T2}.commit", 1) is None
    with pytest.raises(InvalidArgumentError, match="completion time"):
        Instant(T1, "commit", State.COMPLETED).file_name(2)
    with pytest.raises(UnsupportedTableError, match="layout version 3"):
        Instant.parse(f"{T1}.commit", 3)


def test_instants_sort_by_time_then_state() -> None:
    instants = [
        Instant(T2, "deltacommit", State.REQUESTED),
        Instant(T1, "commit", State.COMPLETED),
        Instant(T1, "compaction", State.INFLIGHT),
        Instant(T1, "compaction", State.REQUESTED),
    ]
    assert sorted(instants) == [instants[3], instants[2], instants[1], instants[0]]
    assert State.REQUESTED < State.INFLIGHT < State.COMPLETED


# --- loading --------------------------------------------------------------------------------

COMPLETED_COMMITS = {  # completed commit-type instants of each sample (README + listing)
    "quickstart_trips_table-mor-avro-v6_trips_8i1u": 2,
    "sample_table-cow-v6_complexkeygen_hivestyle": 2,
    "sample_table-cow-v6_empty": 0,
    "sample_table-cow-v6_nonpartitioned": 2,
    "sample_table-cow-v6_simplekeygen_hivestyle_no_metafields": 1,
    "sample_table-cow-v6_simplekeygen_nonhivestyle": 2,
    "sample_table-cow-v6_timebasedkeygen_nonhivestyle": 2,
    "sample_table-mor-parquet-v6_complexkeygen_hivestyle": 2,
    "sample_table-mor-parquet-v6_empty": 0,
    "sample_table-mor-parquet-v6_nonpartitioned": 2,
    "sample_table-mor-parquet-v6_simplekeygen_hivestyle_no_metafields": 1,
    "sample_table-mor-parquet-v6_simplekeygen_nonhivestyle": 2,
    "sample_table-mor-parquet-v6_simplekeygen_nonhivestyle_overwritetable": 3,
    "sample_table-cow-v8_empty": 0,
    "sample_table-cow-v8_nonpartitioned": 2,
    "sample_table-cow-v8_simplekeygen_hivestyle_no_metafields": 1,
    "sample_table-cow-v8_simplekeygen_nonhivestyle": 2,
}


def _load_sample(sample: Sample, tmp_path: Path) -> tuple[FileIO, str, Timeline]:
    base = str(unpack(sample, tmp_path))
    io = open_fileio(base)
    config = load_table_config(io, base)
    return io, base, Timeline.load(io, base, config.timeline_layout_version)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_every_sample_timeline_loads(sample: Sample, tmp_path: Path) -> None:
    io, base, timeline = _load_sample(sample, tmp_path)
    assert timeline.layout_version == {6: 1, 8: 2}[sample.version]
    completed = timeline.completed()
    assert len(completed) == COMPLETED_COMMITS[sample.id]
    assert timeline.pending(None) == ()
    assert all(i.action == ("deltacommit" if sample.table_type == "MERGE_ON_READ" else "commit")
               for i in completed if i.action != "replacecommit")
    assert all((i.completion_time is not None) == (sample.version == 8) for i in completed)
    assert all(timeline.is_completed(i.timestamp) for i in completed)
    assert timeline.last_completed() == (completed[-1] if completed else None)
    for instant in completed:
        assert timeline.read_commit_metadata(io, base, instant).schema is not None


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_sample_timelines_agree_with_hudi_rs(sample: Sample, tmp_path: Path) -> None:
    hudi = pytest.importorskip("hudi")
    _, base, timeline = _load_sample(sample, tmp_path)
    theirs = hudi.HudiTableBuilder.from_base_uri(base).build().get_timeline()
    for action, getter in [
        ("commit", theirs.get_completed_commits),
        ("deltacommit", theirs.get_completed_deltacommits),
        ("replacecommit", theirs.get_completed_replacecommits),
    ]:
        assert [i.timestamp for i in timeline.completed((action,))] == [i.timestamp for i in getter()]


def test_overwrite_sample_has_its_replacecommit(tmp_path: Path) -> None:
    sample = next(s for s in SAMPLES if s.name.endswith("overwritetable"))
    io, base, timeline = _load_sample(sample, tmp_path)
    (replace,) = timeline.completed(("replacecommit",))
    assert replace.timestamp == "20250121000702475"
    assert len(timeline.read_commit_metadata(io, base, replace).replaced_file_ids()) == 3


def _touch(io: FileIO, folder: str, *names: str, content: bytes = b"") -> None:
    for name in names:
        io.write_atomic(join(folder, name), content)


def test_load_keeps_each_instant_in_its_latest_state(fileio: FileIO, any_root: str) -> None:
    folder = timeline_dir(any_root, 1)
    _touch(
        fileio, folder,
        f"{T1}.commit.requested", f"{T1}.inflight", f"{T1}.commit",
        f"{T2}.compaction.requested", f"{T2}.compaction.inflight", f"{T2}.commit",
        f"{T3}.compaction.requested",
        f"{T4}.deltacommit.requested", f"{T4}.deltacommit.inflight",
        f"{T5}.commit.requested", f"{T5}.inflight",
        "hoodie.properties", "archived/x", ".aux/.bootstrap/y", "metadata/.hoodie/z",
    )
    fileio.makedirs(join(folder, f"{T1}.deltacommit"))  # a folder is never an instant
    timeline = Timeline.load(fileio, any_root, 1)
    assert timeline.instants == (
        Instant(T1, "commit", State.COMPLETED),
        Instant(T2, "commit", State.COMPLETED),
        Instant(T3, "compaction", State.REQUESTED),
        Instant(T4, "deltacommit", State.INFLIGHT),
        Instant(T5, "commit", State.INFLIGHT),
    )
    assert timeline.completed() == timeline.instants[:2]
    assert timeline.pending() == timeline.instants[3:]
    assert timeline.pending(("compaction",)) == (Instant(T3, "compaction", State.REQUESTED),)
    assert timeline.pending(None) == timeline.instants[2:]
    assert timeline.last_completed() == Instant(T2, "commit", State.COMPLETED)
    assert timeline.last_timestamp() == T5
    assert timeline.is_completed(T2) and not timeline.is_completed(T4)


def test_empty_or_missing_timeline(fileio: FileIO, any_root: str) -> None:
    timeline = Timeline.load(fileio, any_root, 1)
    assert timeline.instants == ()
    assert timeline.last_completed() is None and timeline.last_timestamp() is None


def test_completed_as_of_layout_1_uses_instant_time(fileio: FileIO, any_root: str) -> None:
    _touch(fileio, timeline_dir(any_root, 1), f"{T1}.deltacommit", f"{T2}.rollback",
           f"{T3}.deltacommit", f"{T4}.deltacommit.inflight")
    past = Timeline.load(fileio, any_root, 1).completed_as_of(T2)
    assert past.instants == (Instant(T1, "deltacommit", State.COMPLETED),
                             Instant(T2, "rollback", State.COMPLETED))
    assert past.completed() == (Instant(T1, "deltacommit", State.COMPLETED),)
    assert not past.is_completed(T3)


def test_completed_as_of_layout_2_uses_instant_time_too(fileio: FileIO, any_root: str) -> None:
    """As Hudi 1.0's as.of.instant (tests/interop/test_hudi_spark_writes.py): T2 completed
    at T3, after T2, and still counts as of T2."""
    _touch(fileio, timeline_dir(any_root, 2), f"{T1}_{T4}.deltacommit", f"{T2}_{T3}.deltacommit")
    timeline = Timeline.load(fileio, any_root, 2)
    assert [i.timestamp for i in timeline.completed_as_of(T1).completed()] == [T1]
    assert [i.timestamp for i in timeline.completed_as_of(T2).completed()] == [T1, T2]


def test_read_commit_metadata(fileio: FileIO, any_root: str) -> None:
    folder = timeline_dir(any_root, 1)
    metadata = CommitMetadata({}, {"schema": "{}"}, "UPSERT")
    _touch(fileio, folder, f"{T1}.deltacommit", content=metadata.to_json())
    _touch(fileio, folder, f"{T2}.deltacommit")
    _touch(fileio, folder, f"{T3}.deltacommit", content=b"{broken")
    timeline = Timeline.load(fileio, any_root, 1)
    first, second, third = timeline.completed()
    assert timeline.read_commit_metadata(fileio, any_root, first) == metadata
    assert timeline.read_commit_metadata(fileio, any_root, second) == CommitMetadata.empty()
    with pytest.raises(CorruptFileError, match=f"{T3}.deltacommit"):
        timeline.read_commit_metadata(fileio, any_root, third)


# --- instant times --------------------------------------------------------------------------


def test_new_instant_time_formats_utc_millis() -> None:
    moment = datetime(2025, 3, 31, 3, 6, 42, 808_999, tzinfo=UTC)
    assert new_instant_time(None, lambda: moment) == "20250331030642808"
    local = moment.astimezone(timezone(timedelta(hours=5)))
    assert new_instant_time(None, lambda: local) == "20250331030642808"
    assert new_instant_time(None, lambda: moment.replace(tzinfo=None)) == "20250331030642808"
    assert parse_instant_time("20250331030642808") == moment.replace(microsecond=808_000)


def test_new_instant_time_is_strictly_increasing_under_a_frozen_clock() -> None:
    frozen = datetime(2025, 1, 1, 23, 59, 59, 998_000, tzinfo=UTC)
    times: list[str] = []
    last = None
    for _ in range(5):
        last = new_instant_time(last, lambda: frozen)
        times.append(last)
    assert times == [
        "20250101235959998",
        "20250101235959999",
        "20250102000000000",
        "20250102000000001",
        "20250102000000002",
    ]


def test_new_instant_time_moves_past_a_clock_that_went_back() -> None:
    behind = datetime(2024, 1, 1, tzinfo=UTC)
    assert new_instant_time("20250101000000000", lambda: behind) == "20250101000000001"
    assert new_instant_time("20250101000000", lambda: behind) == "20250101000000001"
    ahead = datetime(2026, 1, 1, tzinfo=UTC)
    assert new_instant_time("20250101000000000", lambda: ahead) == "20260101000000000"


@pytest.mark.parametrize("bad", ["2025", "2025010100000000x", "20251301000000000", ""])
def test_bad_instant_times_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="instant time"):
        parse_instant_time(bad)


# --- writing --------------------------------------------------------------------------------


def _names(io: FileIO, base: str) -> list[str]:
    return sorted(f.name for f in io.list_dir(timeline_dir(base, 1)) if not f.is_dir)


def test_writer_names_files_like_hudi(fileio: FileIO, any_root: str) -> None:
    writer = TimelineWriter(fileio, any_root)
    delta = writer.request(T1, "deltacommit")
    delta = writer.inflight(delta, b"{}")
    delta = writer.complete(delta, b"done")
    commit = writer.inflight(writer.request(T2, "commit"))
    assert _names(fileio, any_root) == [
        f"{T1}.deltacommit", f"{T1}.deltacommit.inflight", f"{T1}.deltacommit.requested",
        f"{T2}.commit.requested", f"{T2}.inflight",
    ]
    assert delta == Instant(T1, "deltacommit", State.COMPLETED)
    assert commit == Instant(T2, "commit", State.INFLIGHT)
    assert fileio.read_bytes(join(timeline_dir(any_root, 1), f"{T1}.deltacommit")) == b"done"
    compaction = writer.inflight(writer.request(T3, "compaction", b"plan"))
    assert writer.complete(compaction, b"") == Instant(T3, "commit", State.COMPLETED)
    assert f"{T3}.commit" in _names(fileio, any_root)


def test_writer_refuses_taken_instants_and_wrong_states(fileio: FileIO, any_root: str) -> None:
    writer = TimelineWriter(fileio, any_root)
    requested = writer.request(T1, "deltacommit")
    with pytest.raises(AlreadyExistsError):
        writer.request(T1, "deltacommit")
    with pytest.raises(InvalidArgumentError, match="can only complete an instant in state inflight"):
        writer.complete(requested, b"")
    inflight = writer.inflight(requested)
    with pytest.raises(InvalidArgumentError, match="move to inflight"):
        writer.inflight(inflight)
    writer.complete(inflight, b"")
    with pytest.raises(AlreadyExistsError):
        writer.complete(inflight, b"again")
    with pytest.raises(InvalidArgumentError, match="instant time"):
        writer.request("2025", "deltacommit")
    with pytest.raises(InvalidArgumentError, match="action"):
        writer.request(T2, "Delta.Commit")


def test_layout_2_writer_names_completed_instants_by_completion_time(fileio: FileIO, any_root: str) -> None:
    """Versions 8 and 9: every file under ``.hoodie/timeline``; a completed instant named
    ``<t>_<completion>.<action>``, its completion time after its instant and after every
    completion before it; an instant completes once; a rollback completes the same way."""
    writer = TimelineWriter(fileio, any_root, 2)
    first = writer.complete(writer.inflight(writer.request(T1, "deltacommit"), b"{}"), b"done")
    second = writer.complete(writer.inflight(writer.request(T2, "compaction", b"plan")), b"")
    assert (first.action, second.action) == ("deltacommit", "commit")
    assert T1 < first.completion_time < second.completion_time and T2 < second.completion_time
    with pytest.raises(AlreadyExistsError):
        writer.complete(Instant(T1, "deltacommit", State.INFLIGHT), b"again")
    with pytest.raises(InvalidArgumentError, match="has completed"):
        writer.remove_pending(Instant(T1, "deltacommit", State.INFLIGHT))
    target = writer.inflight(writer.request(T3, "deltacommit"))
    rollback = writer.rollback(target, {}, "20250101000000900")
    names = sorted(f.name for f in fileio.list_dir(timeline_dir(any_root, 2)) if not f.is_dir)
    assert names == sorted([
        f"{T1}_{first.completion_time}.deltacommit", f"{T1}.deltacommit.inflight", f"{T1}.deltacommit.requested",
        f"{T2}_{second.completion_time}.commit", f"{T2}.compaction.inflight", f"{T2}.compaction.requested",
        f"20250101000000900_{rollback.completion_time}.rollback", "20250101000000900.rollback.inflight",
        "20250101000000900.rollback.requested",
    ])
    timeline = Timeline.load(fileio, any_root, 2)
    assert [(i.timestamp, i.completion_time) for i in timeline.completed(None)] == [
        (T1, first.completion_time), (T2, second.completion_time), ("20250101000000900", rollback.completion_time)]
    assert fileio.read_bytes(timeline.instant_path(any_root, first)) == b"done"


def test_start_requests_and_moves_to_inflight_at_once(fileio: FileIO, any_root: str) -> None:
    """Both files empty, as ``request`` then ``inflight`` write them; an instant taken (in
    either state) is refused."""
    writer = TimelineWriter(fileio, any_root, 2)
    inflight = writer.start(T1, "deltacommit")
    assert inflight == Instant(T1, "deltacommit", State.INFLIGHT)
    folder = timeline_dir(any_root, 2)
    names = [f.name for f in fileio.list_dir(folder)]
    assert names == [f"{T1}.deltacommit.inflight", f"{T1}.deltacommit.requested"]  # no temporary file left
    assert all(fileio.read_bytes(join(folder, name)) == b"" for name in names)
    assert Timeline.load(fileio, any_root, 2).pending() == (inflight,)
    with pytest.raises(AlreadyExistsError):
        writer.start(T1, "deltacommit")
    fileio.write_atomic(join(folder, f"{T2}.deltacommit.inflight"), b"")  # a requested file lost
    with pytest.raises(AlreadyExistsError):
        writer.start(T2, "deltacommit")
    with pytest.raises(InvalidArgumentError, match="action"):
        writer.start(T3, "Delta.Commit")
    done = writer.complete(inflight, b"done")
    assert (done.timestamp, done.state) == (T1, State.COMPLETED)


def test_complete_checks_a_listing_given_instead_of_listing_again(fileio: FileIO, any_root: str) -> None:
    writer = TimelineWriter(fileio, any_root, 2)
    first = writer.start(T1, "deltacommit")
    second = writer.start(T2, "deltacommit")
    listed = Timeline.load(fileio, any_root, 2)
    says_done = Timeline(2, (Instant(T1, "deltacommit", State.COMPLETED, T2),))
    with pytest.raises(AlreadyExistsError, match="has completed"):  # as the listing has it, not the folder
        writer.complete(first, b"done", listed=says_done)
    writer.complete(first, b"done", listed=listed)
    writer.complete(second, b"done", listed=listed)
    assert [i.timestamp for i in Timeline.load(fileio, any_root, 2).completed()] == [T1, T2]


def test_remove_pending(fileio: FileIO, any_root: str) -> None:
    writer = TimelineWriter(fileio, any_root)
    pending = writer.inflight(writer.request(T1, "commit"))
    done = writer.complete(writer.inflight(writer.request(T2, "deltacommit")), b"")
    writer.remove_pending(pending)
    assert _names(fileio, any_root) == [f"{T2}.deltacommit", f"{T2}.deltacommit.inflight",
                                        f"{T2}.deltacommit.requested"]
    with pytest.raises(InvalidArgumentError, match="has completed"):
        writer.remove_pending(Instant(T2, "deltacommit", State.INFLIGHT))
    assert Timeline.load(fileio, any_root, 1).completed() == (done,)


def _pending_with_data(io: FileIO, base: str) -> tuple[TimelineWriter, Instant]:
    writer = TimelineWriter(io, base)
    writer.complete(writer.inflight(writer.request(T1, "deltacommit")), b"")
    target = writer.inflight(writer.request(T2, "deltacommit"))
    io.write_atomic(join(base, "city=sf", "f-0_0-1-0_" + T2 + ".parquet"), b"data")
    io.write_atomic(join(base, "city=sf", ".g-0_" + T1 + ".log.2_0-1-0"), b"data")
    io.write_atomic(join(base, "f-1_0-1-0_" + T2 + ".parquet"), b"data")
    return writer, target


_DELETED = {
    "city=sf": ["f-0_0-1-0_" + T2 + ".parquet", ".g-0_" + T1 + ".log.2_0-1-0"],
    "": ["f-1_0-1-0_" + T2 + ".parquet"],
}


def test_rollback_writes_hudis_files_and_deletes_the_data(fileio: FileIO, any_root: str) -> None:
    writer, target = _pending_with_data(fileio, any_root)
    done = writer.rollback(target, _DELETED, T3)
    assert done == Instant(T3, "rollback", State.COMPLETED)
    assert _names(fileio, any_root) == [
        f"{T1}.deltacommit", f"{T1}.deltacommit.inflight", f"{T1}.deltacommit.requested",
        f"{T3}.rollback", f"{T3}.rollback.inflight", f"{T3}.rollback.requested",
    ]
    for partition, names in _DELETED.items():
        for name in names:
            assert not fileio.exists(join(any_root, partition, name))
    folder = timeline_dir(any_root, 1)
    assert fileio.read_bytes(join(folder, f"{T3}.rollback.inflight")) == b""
    plan = RollbackPlan.from_avro(fileio.read_bytes(join(folder, f"{T3}.rollback.requested")))
    assert (plan.target_timestamp, plan.target_action) == (T2, "deltacommit")
    assert plan.files_to_delete[""] == (join(any_root, "f-1_0-1-0_" + T2 + ".parquet"),)
    metadata = RollbackMetadata.from_avro(fileio.read_bytes(join(folder, f"{T3}.rollback")))
    assert (metadata.start_rollback_time, metadata.target_timestamp) == (T3, T2)
    assert metadata.deleted_files == plan.files_to_delete
    timeline = Timeline.load(fileio, any_root, 1)
    assert timeline.completed(("rollback",)) == (done,)
    assert timeline.pending(None) == ()
    assert timeline.last_timestamp() == T3


@pytest.mark.parametrize("crash_after", ["requested", "data deleted", "target removed", "inflight"])
def test_rollback_resumes_after_a_crash(fileio: FileIO, any_root: str, crash_after: str) -> None:
    writer, target = _pending_with_data(fileio, any_root)
    plan = RollbackPlan(target.timestamp, target.action, {
        p: tuple(join(any_root, p, n) for n in names) for p, names in _DELETED.items()
    })
    rollback = writer.request(T3, "rollback", plan.to_avro())
    if crash_after != "requested":
        for paths in plan.files_to_delete.values():
            for path in paths[:1]:  # a crash in the middle of deleting
                fileio.delete(path)
    if crash_after in ("target removed", "inflight"):
        writer.remove_pending(target)
    if crash_after == "inflight":
        rollback = writer.inflight(rollback)
    (pending,) = Timeline.load(fileio, any_root, 1).pending(("rollback",))
    assert pending == rollback
    assert writer.resume_rollback(pending) == Instant(T3, "rollback", State.COMPLETED)
    timeline = Timeline.load(fileio, any_root, 1)
    assert timeline.pending(None) == ()
    assert [str(i) for i in timeline.instants] == [f"{T1}.deltacommit[completed]", f"{T3}.rollback[completed]"]
    assert not any(fileio.exists(p) for paths in plan.files_to_delete.values() for p in paths)


def test_resume_refuses_a_plan_deleting_outside_the_table(fileio: FileIO, any_root: str) -> None:
    writer, target = _pending_with_data(fileio, any_root)
    outside = join(any_root + "-other", "x.parquet")
    fileio.write_atomic(outside, b"keep")
    plan = RollbackPlan(target.timestamp, target.action, {"": (outside,)})
    rollback = writer.request(T3, "rollback", plan.to_avro())
    with pytest.raises(CorruptFileError, match="is not below"):
        writer.resume_rollback(rollback)
    assert fileio.read_bytes(outside) == b"keep"
    fileio.delete(outside)


def test_rollback_refuses_completed_targets_and_non_rollbacks(fileio: FileIO, any_root: str) -> None:
    writer = TimelineWriter(fileio, any_root)
    done = writer.complete(writer.inflight(writer.request(T1, "deltacommit")), b"")
    with pytest.raises(InvalidArgumentError, match="completed"):
        writer.rollback(done, {}, T2)
    with pytest.raises(InvalidArgumentError, match="not a pending rollback"):
        writer.resume_rollback(done)
    with pytest.raises(InvalidArgumentError, match="no plan"):
        writer.resume_rollback(Instant(T2, "rollback", State.REQUESTED))


def test_hudi_rs_reads_a_table_with_a_completed_rollback(tmp_path: Path) -> None:
    hudi = pytest.importorskip("hudi")
    base = str(tmp_path / "t")
    io = open_fileio(base)
    schema = json.dumps({"type": "record", "name": "t_record", "namespace": "hoodie.t", "fields": [
        {"name": "id", "type": ["null", "string"], "default": None},
        {"name": "ts", "type": ["null", "long"], "default": None},
    ]})
    write_table_config(io, base, TableConfig.new("t", "MERGE_ON_READ", ("id",), "ts", (), 2, schema))
    writer = TimelineWriter(io, base)
    first = writer.inflight(writer.request(T1, "deltacommit"))
    writer.complete(first, CommitMetadata({}, {"schema": schema}, "UPSERT").to_json())
    failed = writer.inflight(writer.request(T2, "deltacommit"))
    io.write_atomic(join(base, f"00000000-aaaa-bbbb-cccc-dddddddddddd-0_0-1-0_{T2}.parquet"), b"x")
    writer.rollback(failed, {"": [f"00000000-aaaa-bbbb-cccc-dddddddddddd-0_0-1-0_{T2}.parquet"]}, T3)

    table = hudi.HudiTableBuilder.from_base_uri(base).build()
    timeline = table.get_timeline()
    assert [i.timestamp for i in timeline.get_completed_deltacommits()] == [T1]
    assert timeline.get_completed_commits() == []
    assert sum(batch.num_rows for batch in table.read(hudi.HudiReadOptions())) == 0
    assert COMMIT_ACTIONS == ("commit", "deltacommit", "replacecommit")


@pytest.mark.parametrize("table_version", [6, 8])
def test_files_of_instants_a_hudi_writer_archived_are_read(tmp_path: Path, table_version: int) -> None:
    """Hudi's writers archive old instants out of the active timeline (into
    ``.hoodie/archived`` or ``.hoodie/timeline/history``): their files stay committed
    (Hudi's ``containsOrBeforeTimelineStarts``)."""
    import pyarrow as pa

    from memtier.hudi.table import HudiTable
    from memtier.hudi.timeline import timeline_dir

    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.int64())])
    table = HudiTable.create(path, schema, "id", "ts", buckets=2, table_version=table_version)
    table.write(pa.table({"id": [1, 2, 3], "ts": [1, 1, 1]}, schema=schema))
    table.write(pa.table({"id": [3, 4], "ts": [2, 2]}, schema=schema))
    timeline = table.timeline()
    first = timeline.completed()[0]
    folder = timeline_dir(path, timeline.layout_version)
    for entry in table.io.list_dir(folder):  # archived: its instant files leave the active timeline
        if entry.name.startswith(first.timestamp):
            table.io.delete(entry.path)
    archived = HudiTable.open(path)
    assert archived.timeline().is_completed(first.timestamp)
    assert sorted(archived.read().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "ts": 1}, {"id": 2, "ts": 1}, {"id": 3, "ts": 2}, {"id": 4, "ts": 2}]
    assert not archived.timeline().is_completed("99991231235959999")  # never seen: not completed
