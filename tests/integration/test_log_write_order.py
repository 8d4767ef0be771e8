"""Backfills and the write tier's flushes into the same file groups, interleaved step by
step: both commit, and every reader (memtier, hudi-rs, Apache Hudi on Spark) merges them
by ordering value with ties going to the later completion, before and after compaction.

The backfill is memtier's Spark backfill writer driven as Spark drives it (tasks write,
the driver commits or aborts) against a master and table server over Flight. Flushes are
the table server's own, except where a flush must be caught between its plan and its
completion: there a second writer goes through the master's commit path as a table
server's flush does (begin, plan and inflight, files, complete)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from memtier.client import Client
from memtier.compaction.worker import ServiceWorker
from memtier.errors import CommitFailedError
from memtier.hudi.filenames import BaseFile, LogFile, classify
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.routing import route
from memtier.hudi.writer import commit_metadata, existing_buckets, plan_changes, planned_metadata, write_files
from memtier.master.master import COMPLETION_TIME_KEY
from tests.support.hudi_spark import HudiSpark
from tests.support.hudirs import hudi_rs_read
from tests.support.rpccluster import RpcCluster

pytestmark = [pytest.mark.slow, pytest.mark.spark]
pytest.importorskip("pyspark")

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.string())])
DATA = SCHEMA.names


@pytest.fixture
def reader(cluster: RpcCluster) -> Client:
    """A client kept through the test: it reuses its read point while no commit moved it."""
    return cluster.client()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RpcCluster]:
    running = RpcCluster(str(tmp_path))
    running.add_server("ts-0")
    running.client().create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city",
                                  buckets=2)
    yield running
    running.close()


def _rows(ids: range | list[int], ts: int, v: str, city: str = "ams") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "ts": [ts] * len(ids), "city": [city] * len(ids), "v": [v] * len(ids)},
                    schema=SCHEMA)


class Model:
    """The rows every reader must return: per key the greatest ts, the later completion on a tie."""

    def __init__(self) -> None:
        self.rows: dict[int, dict] = {}

    def completed(self, batch: pa.Table) -> None:
        for row in batch.to_pylist():
            if row["id"] not in self.rows or row["ts"] >= self.rows[row["id"]]["ts"]:
                self.rows[row["id"]] = row

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(sorted(self.rows.values(), key=lambda r: r["id"]), schema=SCHEMA)


def _backfill(cluster: RpcCluster, batch: pa.Table):  # noqa: ANN202 - (Backfill, its tasks' message)
    from memtier.spark.backfill import Backfill
    from memtier.spark.options import BACKFILL, SourceOptions

    options = SourceOptions.parse({"table": "t", "address": cluster.address}, BACKFILL, "batch write")
    backfill = Backfill(options, SCHEMA)
    return backfill, backfill.write(iter(batch.to_batches()))


def _streamed_then_backfilling(cluster: RpcCluster, model: Model):  # noqa: ANN202 - (backfill, message, rows)
    """The stream's first rows flushed (base files), then a backfill of every key at ts 5
    whose tasks wrote their files, not committed."""
    first = _rows(range(40), 1, "stream-1")
    _stream(cluster, first)
    model.completed(first)
    backfilled = _rows(range(40), 5, "backfill")
    return (*_backfill(cluster, backfilled), backfilled)


def _stream(cluster: RpcCluster, batch: pa.Table) -> list[str]:
    cluster.client().write("t", batch)
    return cluster.client().flush("t")


def _held_flush(cluster: RpcCluster, batch: pa.Table) -> tuple[str, Callable[[], None]]:
    """A flush planned, inflight and written through the master's commit path: its
    instant, and the call that completes it."""
    master = cluster.master
    meta = master.meta("t")
    rows = batch.append_column("_hoodie_is_deleted", pa.array([False] * len(batch)))
    view = FileSystemView.build(meta.io, meta.base_path, meta.timeline())
    changes = route(meta, rows.drop_columns(["_hoodie_is_deleted"]), deletes=False,
                    existing=existing_buckets(view))
    groups = [(c.partition_path, c.file_id) for c in changes]
    instant = master.begin_commit("t", "deltacommit", owner="ts-held", file_groups=groups)
    timeline = meta.timeline()
    plans = plan_changes(meta, changes, FileSystemView.build(meta.io, meta.base_path, timeline), instant)
    master.commit_inflight("t", instant, planned_metadata(meta, plans, "UPSERT").to_json())
    stats = write_files(meta, plans, instant, timeline)
    return instant, lambda: master.complete_commit("t", instant, commit_metadata(meta, stats, "UPSERT"),
                                                   file_groups=groups, check_conflicts=["replacecommit"])


def _run_pending(cluster: RpcCluster) -> None:
    """Run the pending table services to completion here, as the pool would."""
    while (done := ServiceWorker("svc-0", cluster.master).run_once()) is not None:
        assert done["state"] == "completed", done


def _compact(cluster: RpcCluster) -> None:
    assert cluster.master.schedule_service("t", "compaction") is not None
    _run_pending(cluster)


def _path(cluster: RpcCluster) -> str:
    return str(Path(cluster.root) / "tables" / "t")


def _logs(cluster: RpcCluster, city: str = "ams") -> list[LogFile]:
    names = (classify(p.name) for p in (Path(_path(cluster)) / f"city={city}").iterdir())
    return sorted((f for f in names if isinstance(f, LogFile)), key=LogFile.sort_key)


def _read_by_all(cluster: RpcCluster, reader: Client, spark: HudiSpark, model: Model, what: str) -> None:
    """memtier (a fresh client, and ``reader``, which keeps its read point), hudi-rs and
    Hudi on Spark read the model."""
    expected = model.table()
    assert cluster.client().read("t").select(DATA).sort_by("id").equals(expected), what
    assert reader.read("t").select(DATA).sort_by("id").equals(expected), what
    assert hudi_rs_read(_path(cluster)).select(DATA).sort_by("id").equals(expected), what
    assert spark.read(_path(cluster)).select(DATA).sort_by("id").equals(expected), what


def _log_order(cluster: RpcCluster, city: str = "ams") -> dict[str, list[str]]:
    """File id -> the instant whose blocks each of its log files holds, in log order."""
    from memtier.hudi.logformat import iter_blocks

    path = Path(_path(cluster)) / f"city={city}"
    order: dict[str, list[str]] = {}
    for f in _logs(cluster, city):
        order.setdefault(f.file_id, []).append(next(iter_blocks((path / f.name).read_bytes(), f.name)).instant_time)
    return order


def test_a_backfill_and_flushes_into_its_file_groups_both_commit_ties_going_to_the_later_completion(
    cluster: RpcCluster, reader: Client, hudi_spark: HudiSpark,
) -> None:
    model = Model()
    backfill, message, backfilled = _streamed_then_backfilling(cluster, model)
    before = _rows(range(20), 5, "flushed-before")
    [flush_before] = _stream(cluster, before)  # the tier flushes into the same file groups meanwhile
    model.completed(before)
    _read_by_all(cluster, reader, hudi_spark, model, "the backfill is not visible before its commit")
    backfill.commit([message])
    model.completed(backfilled)  # equal ts on ids 0-19: the backfill completed later, it wins
    assert backfill.instant < flush_before  # begun first, completed later: the newest instant did not move
    _read_by_all(cluster, reader, hudi_spark, model, "the backfill committed")
    after = _rows(range(10, 30), 5, "flushed-after")
    [flush_after] = _stream(cluster, after)
    model.completed(after)
    _read_by_all(cluster, reader, hudi_spark, model, "after the backfill and a later flush")
    for order in _log_order(cluster).values():  # in every file group: log order is completion order
        assert order == [flush_before, backfill.instant, flush_after], order
    timeline = cluster.master.meta("t").timeline()
    completion = {i.timestamp: timeline.read_commit_metadata(cluster.master.meta("t").io, _path(cluster), i)
                  .extra_metadata[COMPLETION_TIME_KEY] for i in timeline.completed(("deltacommit",))}
    assert completion[flush_before] < completion[backfill.instant] < completion[flush_after]
    _compact(cluster)
    _read_by_all(cluster, reader, hudi_spark, model, "after compaction")
    assert hudi_rs_read(_path(cluster), "read_optimized").select(DATA).sort_by("id").equals(model.table())


def test_a_flush_pending_while_a_backfill_completes_goes_after_it(
    cluster: RpcCluster, reader: Client, hudi_spark: HudiSpark,
) -> None:
    model = Model()
    backfill, message, backfilled = _streamed_then_backfilling(cluster, model)
    held = _rows(range(0, 40, 2), 5, "held-flush")
    held_instant, complete_held = _held_flush(cluster, held)  # its log files named before the backfill completes
    planned = {f.name for f in _logs(cluster)}  # the flush's (the first stream wrote base files)
    backfill.commit([message])
    model.completed(backfilled)
    _read_by_all(cluster, reader, hudi_spark, model, "the backfill committed, the flush still pending")
    for order in _log_order(cluster).values():  # (the pending flush's files are still where it planned them)
        assert order == [held_instant, backfill.instant], order
    complete_held()  # completes after the backfill: its files move after the backfill's
    model.completed(held)
    _read_by_all(cluster, reader, hudi_spark, model, "the flush completed after the backfill")
    for order in _log_order(cluster).values():
        assert order == [backfill.instant, held_instant], order
    assert planned and not planned & {f.name for f in _logs(cluster)}  # the flush's log files were renamed
    filters = json.loads((Path(_path(cluster)) / ".hoodie/.aux/memtier/keyfilters" / f"{held_instant}.json")
                         .read_text())["files"]
    assert {Path(f).name for f in filters} <= {f.name for f in _logs(cluster)}  # the key filters followed
    _compact(cluster)
    _read_by_all(cluster, reader, hudi_spark, model, "after compaction")


def test_a_backfill_joins_the_slice_a_compaction_planned_meanwhile_opens(
    cluster: RpcCluster, reader: Client, hudi_spark: HudiSpark,
) -> None:
    model = Model()
    for ts in (1, 2):
        batch = _rows(range(40), ts, f"stream-{ts}")
        _stream(cluster, batch)
        model.completed(batch)
    backfilled = _rows(range(10, 50), 2, "backfill")  # ties with ts 2 on ids 10-39: it completes later
    backfill, message = _backfill(cluster, backfilled)
    request = cluster.master.schedule_service("t", "compaction")  # planned without the backfill's files
    compaction = request["tasks"][0]["instant"]
    without = model.table()
    backfill.commit([message])
    model.completed(backfilled)
    assert {f.base_instant for f in _logs(cluster) if f.write_token.endswith("-1-0")} == {compaction}
    assert reader.read("t").select(DATA).sort_by("id").equals(model.table())
    assert hudi_spark.read(_path(cluster)).select(DATA).sort_by("id").equals(model.table())
    _run_pending(cluster)
    _read_by_all(cluster, reader, hudi_spark, model, "once the compaction completed, the backfill's logs on top")
    # time travel to the backfill's instant: memtier has its rows (its log files sit in the
    # slice the compaction opened, which Hudi's readers leave out as of an earlier instant)
    assert reader.read("t", as_of=backfill.instant).select(DATA).sort_by("id").equals(model.table())
    assert hudi_rs_read(_path(cluster), as_of=backfill.instant).select(DATA).sort_by("id").equals(without)
    assert hudi_spark.read(_path(cluster), as_of=backfill.instant).select(DATA).sort_by("id").equals(without)
    _compact(cluster)
    _read_by_all(cluster, reader, hudi_spark, model, "compacted again")


def test_a_flush_starting_a_file_group_a_backfill_started_first_yields_and_writes_into_it(
    cluster: RpcCluster, reader: Client, hudi_spark: HudiSpark,
) -> None:
    model = Model()
    backfilled = _rows(range(20), 3, "backfill", city="new")
    backfill, message = _backfill(cluster, backfilled)  # a partition no file group of which exists yet
    streamed = _rows(range(10, 30), 3, "stream", city="new")
    _, complete_held = _held_flush(cluster, streamed)  # starts the same file groups with base files
    backfill.commit([message])  # first: the file groups start log-only
    model.completed(backfilled)
    with pytest.raises(CommitFailedError, match="conflicts"):
        complete_held()  # its base files would hide the backfill's slices: rolled back
    _read_by_all(cluster, reader, hudi_spark, model, "the yielding flush rolled back")
    _stream(cluster, streamed)  # the tier flushes the rows again: into the backfill's slices now
    model.completed(streamed)
    _read_by_all(cluster, reader, hudi_spark, model, "flushed again")
    assert not [f for f in (classify(p.name) for p in (Path(_path(cluster)) / "city=new").iterdir())
                if isinstance(f, BaseFile)]


def test_a_backfill_a_clustering_overtook_fails_cleanly_and_abort_is_then_a_no_op(
    cluster: RpcCluster, reader: Client, hudi_spark: HudiSpark,
) -> None:
    model = Model()
    backfill, message, _ = _streamed_then_backfilling(cluster, model)
    assert cluster.master.schedule_service("t", "clustering") is not None
    assert ServiceWorker("svc-0", cluster.master).run_once()["state"] == "completed"
    with pytest.raises(CommitFailedError, match="replacecommit"):
        backfill.commit([message])
    backfill.abort([message])  # as Spark calls it after the failed commit: nothing left to do
    written = [s["path"] for s in message.stats]
    assert written and not any((Path(_path(cluster)) / p).exists() for p in written)
    _read_by_all(cluster, reader, hudi_spark, model, "nothing of the failed backfill")


def test_an_aborted_backfill_leaves_nothing(cluster: RpcCluster) -> None:
    backfill, message = _backfill(cluster, _rows(range(40), 5, f"backfill-{uuid.uuid4().hex[:4]}"))
    backfill.abort([message, None])  # a task failed: Spark aborts with what the others wrote
    written = [s["path"] for s in message.stats]
    assert written and not any((Path(_path(cluster)) / p).exists() for p in written)
    timeline = cluster.master.meta("t").timeline()
    assert timeline.pending(None) == () and backfill.instant not in {i.timestamp for i in timeline.completed()}
    backfill.abort([message])  # again: a no-op


def test_a_backfill_into_a_copy_on_write_table_is_refused_before_anything_is_begun(cluster: RpcCluster) -> None:
    from memtier.errors import InvalidArgumentError
    from memtier.spark.backfill import Backfill
    from memtier.spark.options import BACKFILL, SourceOptions

    cluster.client().create_table("cow", SCHEMA, record_key="id", ordering_field="ts", buckets=2,
                                  table_type="COPY_ON_WRITE")
    options = SourceOptions.parse({"table": "cow", "address": cluster.address}, BACKFILL, "batch write")
    with pytest.raises(InvalidArgumentError, match="copy-on-write"):
        Backfill(options, SCHEMA)
    assert cluster.master.meta("cow").timeline().instants == ()
