"""Instant content: commit metadata (v6 JSON, v8 Avro) and rollback plan/metadata (Avro)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import fastavro
import pytest

from memtier.errors import InvalidArgumentError, UnsupportedTableError
from memtier.hudi.commit import (
    NULL_COMMIT,
    ROLLBACK_PLAN_SCHEMA,
    CommitMetadata,
    RollbackMetadata,
    RollbackPlan,
    WriteStat,
    is_avro_container,
    read_single_record,
)
from tests.support.samples import SAMPLES, Sample, unpack

_COMPLETED_SUFFIXES = (".commit", ".deltacommit", ".replacecommit")


def _completed_instant_files(table: Path) -> list[Path]:
    folder = table / ".hoodie" / "timeline" if (table / ".hoodie" / "timeline").is_dir() else table / ".hoodie"
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(_COMPLETED_SUFFIXES))


def _decode(data: bytes) -> CommitMetadata:
    return CommitMetadata.decode(data)


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.rows], ids=lambda s: s.id)
def test_every_completed_instant_of_every_sample_decodes(sample: Sample, tmp_path: Path) -> None:
    table = unpack(sample, tmp_path)
    instants = _completed_instant_files(table)
    assert instants
    for path in instants:
        data = path.read_bytes()
        assert is_avro_container(data) == (sample.version == 8), path.name
        metadata = _decode(data)
        assert metadata.schema is not None and json.loads(metadata.schema)["type"] == "record"
        assert metadata.operation_type.startswith(("UPSERT", "INSERT"))
        assert metadata.files(), path.name
        for partition, name in metadata.files():
            assert (table / partition / name).is_file(), f"{path.name} names missing {partition}/{name}"
        for stat in (s for stats in metadata.partition_to_write_stats.values() for s in stats):
            assert stat.file_id and stat.file_size > 0 and stat.num_writes > 0
            assert stat.path.endswith(stat.files()[0])
            assert stat.prev_commit == NULL_COMMIT or stat.prev_commit.isdigit()


def test_replacecommit_sample_names_the_replaced_file_groups(tmp_path: Path) -> None:
    sample = next(s for s in SAMPLES if s.name.endswith("overwritetable"))
    table = unpack(sample, tmp_path)
    data = (table / ".hoodie" / "20250121000702475.replacecommit").read_bytes()
    metadata = CommitMetadata.from_json(data)
    assert metadata.operation_type == "INSERT_OVERWRITE_TABLE"
    assert sorted(metadata.replaced_file_ids()) == [
        ("10", "92e64357-e4d1-4639-a9d3-c3535829d0aa-0"),
        ("20", "d49ae379-4f20-4549-8e23-a5f9604412c0-0"),
        ("30", "de3550df-e12c-4591-9335-92ff992258a2-0"),
    ]


def test_log_write_stats_read_their_delta_fields(tmp_path: Path) -> None:
    table = unpack(SAMPLES[0], tmp_path)  # v6_trips_8i1u: one update into a log file
    metadata = CommitMetadata.from_json((table / ".hoodie" / "20250331030645735.deltacommit").read_bytes())
    (stat,) = metadata.partition_to_write_stats["city=san_francisco"]
    assert stat.is_log_write
    assert (stat.log_version, stat.log_offset) == (1, 0)
    assert stat.base_file == "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_0-13-60_20250331030642808.parquet"
    assert stat.log_files == (".d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_20250331030642808.log.1_0-26-85",)
    assert stat.prev_commit == "20250331030642808"
    assert (stat.num_update_writes, stat.num_inserts, stat.total_write_bytes) == (1, 0, 1148)


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.rows and s.version == 6], ids=lambda s: s.id)
def test_our_json_has_sparks_field_names_and_round_trips(sample: Sample, tmp_path: Path) -> None:
    table = unpack(sample, tmp_path)
    for path in _completed_instant_files(table):
        theirs = json.loads(path.read_bytes())
        metadata = CommitMetadata.from_json(path.read_bytes())
        ours = json.loads(metadata.to_json())
        assert list(ours) == list(theirs)
        for partition, stats in theirs["partitionToWriteStats"].items():
            for their_stat, our_stat in zip(stats, ours["partitionToWriteStats"][partition], strict=True):
                assert list(our_stat) == list(their_stat)
                assert {k: our_stat[k] for k in their_stat if k != "runtimeStats"} == {
                    k: v for k, v in their_stat.items() if k != "runtimeStats"
                }
        assert CommitMetadata.from_json(metadata.to_json()) == metadata
        # Byte for byte what Spark wrote, but for the runtime timings memtier leaves at 0.
        assert _zero_timings(metadata.to_json()) == _zero_timings(path.read_bytes())


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.rows and s.version == 8], ids=lambda s: s.id)
def test_our_avro_has_hudis_field_names_and_round_trips(sample: Sample, tmp_path: Path) -> None:
    """What memtier writes on a version 8/9 timeline: Hudi's writer schema's field names
    (as embedded in the sample's instant files), every value Hudi wrote that memtier keeps."""
    table = unpack(sample, tmp_path)
    for path in _completed_instant_files(table):
        reader = fastavro.reader(io.BytesIO(path.read_bytes()))
        theirs_schema, theirs = reader.writer_schema, next(iter(reader))
        metadata = CommitMetadata.decode(path.read_bytes())
        ours_reader = fastavro.reader(io.BytesIO(metadata.encode(2)))
        ours_schema, ours = ours_reader.writer_schema, next(iter(ours_reader))
        assert [f["name"] for f in ours_schema["fields"]] == [f["name"] for f in theirs_schema["fields"]]
        their_stat_fields = theirs_schema["fields"][0]["type"][1]["values"]["items"]["fields"]
        our_stat_fields = ours_schema["fields"][0]["type"][1]["values"]["items"]["fields"]
        assert {f["name"] for f in their_stat_fields} <= {f["name"] for f in our_stat_fields}
        kept = ("fileId", "path", "prevCommit", "numWrites", "numInserts", "numDeletes", "fileSizeInBytes")
        for partition, stats in theirs["partitionToWriteStats"].items():
            for their_stat, our_stat in zip(stats, ours["partitionToWriteStats"][partition], strict=True):
                assert {k: our_stat[k] for k in kept} == {k: their_stat[k] for k in kept}
        assert ours["extraMetadata"] == theirs["extraMetadata"]
        assert CommitMetadata.decode(metadata.encode(2)) == metadata


def test_replace_metadata_avro_round_trips() -> None:
    metadata = CommitMetadata({"city=sf": (_stat(),)}, {"schema": "{}"}, "CLUSTER",
                              partition_to_replace_file_ids={"city=sf": ("00000001-x-0",)})
    name, record = read_single_record(metadata.encode(2))
    assert name == "HoodieReplaceCommitMetadata"
    assert record["partitionToReplaceFileIds"] == {"city=sf": ["00000001-x-0"]}
    assert CommitMetadata.decode(metadata.encode(2)) == metadata
    assert CommitMetadata.decode(metadata.encode(1)) == metadata


def _zero_timings(data: bytes) -> bytes:
    return re.sub(rb'("total(?:Scan|Upsert|Create)Time" : )\d+', rb"\g<1>0", data)


def _stat(**overrides: object) -> WriteStat:
    args: dict[str, object] = dict(
        file_id="00000001-aaaa-bbbb-cccc-dddddddddddd-0",
        path="city=sf/00000001-aaaa-bbbb-cccc-dddddddddddd-0_0-1-0_20250101000000000.parquet",
        partition_path="city=sf",
        prev_commit=NULL_COMMIT,
        num_writes=2,
        num_inserts=2,
        num_update_writes=0,
        num_deletes=0,
        total_write_bytes=10,
        file_size=10,
    )
    args.update(overrides)
    return WriteStat(**args)  # type: ignore[arg-type]


def test_to_json_is_jackson_pretty_printed() -> None:
    metadata = CommitMetadata({"": ()}, {"schema": '{"a":1}'}, "UPSERT")
    assert metadata.to_json().decode() == (
        "{\n"
        '  "partitionToWriteStats" : {\n'
        '    "" : [ ]\n'
        "  },\n"
        '  "compacted" : false,\n'
        '  "extraMetadata" : {\n'
        '    "schema" : "{\\"a\\":1}"\n'
        "  },\n"
        '  "operationType" : "UPSERT"\n'
        "}"
    )
    assert CommitMetadata({}, {}, "UPSERT").to_json().decode().count("{ }") == 2


def test_log_stat_json_carries_delta_fields_and_files() -> None:
    log = ".00000001-aaaa-bbbb-cccc-dddddddddddd-0_20250101000000000.log.2_0-1-0"
    stat = _stat(path=f"city=sf/{log}", prev_commit="20250101000000000", log_version=2,
                 log_offset=0, base_file=None, log_files=(log,))
    metadata = CommitMetadata({"city=sf": (stat,)}, {"schema": "{}"}, "UPSERT",
                              partition_to_replace_file_ids={"city=la": ("x-0",)})
    decoded = json.loads(metadata.to_json())
    written = decoded["partitionToWriteStats"]["city=sf"][0]
    assert (written["logVersion"], written["baseFile"], written["logFiles"]) == (2, "", [log])
    assert decoded["partitionToReplaceFileIds"] == {"city=la": ["x-0"]}
    assert metadata.files() == [("city=sf", log)]
    assert metadata.replaced_file_ids() == [("city=la", "x-0")]
    assert CommitMetadata.from_json(metadata.to_json()) == metadata


def test_empty_content_is_empty_metadata() -> None:
    for decoded in (CommitMetadata.from_json(b""), CommitMetadata.from_avro(b"")):
        assert decoded == CommitMetadata.empty()
        assert decoded.files() == [] and decoded.schema is None


def test_inflight_skeleton_reads_with_empty_strings(tmp_path: Path) -> None:
    table = unpack(SAMPLES[0], tmp_path)
    metadata = CommitMetadata.from_json((table / ".hoodie" / "20250331030645735.deltacommit.inflight").read_bytes())
    assert metadata.files() == []
    assert all(s.path == "" for stats in metadata.partition_to_write_stats.values() for s in stats)


@pytest.mark.parametrize("data", [b"{not json", b"[1, 2]", b"null"])
def test_bad_json_is_refused(data: bytes) -> None:
    with pytest.raises(InvalidArgumentError, match="commit metadata"):
        CommitMetadata.from_json(data)


def test_avro_that_is_not_commit_metadata_is_refused() -> None:
    plan = RollbackPlan("20250101000000000", "deltacommit", {}).to_avro()
    with pytest.raises(InvalidArgumentError, match="HoodieRollbackPlan, not commit metadata"):
        CommitMetadata.from_avro(plan)
    with pytest.raises(InvalidArgumentError, match="Avro container"):
        CommitMetadata.from_avro(b"Obj\x01garbage")


def test_rollback_plan_round_trips_through_hudis_field_names() -> None:
    plan = RollbackPlan(
        "20250101000000000", "deltacommit",
        {"city=sf": ("/t/city=sf/a.parquet", "/t/city=sf/.a_1.log.1_0-0-0"), "": ("/t/b.parquet",)},
    )
    data = plan.to_avro()
    assert RollbackPlan.from_avro(data) == plan
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.writer_schema["name"] == "org.apache.hudi.avro.model.HoodieRollbackPlan"
    (record,) = list(reader)
    assert record["instantToRollback"] == {"commitTime": "20250101000000000", "action": "deltacommit"}
    assert [r["partitionPath"] for r in record["RollbackRequests"]] == ["city=sf", ""]
    assert record["version"] == 1


def test_rollback_metadata_round_trips_through_hudis_field_names() -> None:
    metadata = RollbackMetadata(
        "20250101000000001", "20250101000000000", "commit", {"p": ("/t/p/a.parquet",)}
    )
    data = metadata.to_avro()
    assert RollbackMetadata.from_avro(data) == metadata
    (record,) = list(fastavro.reader(io.BytesIO(data)))
    assert record["commitsRollback"] == ["20250101000000000"]
    assert record["totalFilesDeleted"] == 1
    assert record["instantsRollback"] == [{"commitTime": "20250101000000000", "action": "commit"}]
    assert record["partitionMetadata"]["p"]["successDeleteFiles"] == ["/t/p/a.parquet"]
    assert record["partitionMetadata"]["p"]["rollbackLogFiles"] == {}
    with pytest.raises(InvalidArgumentError, match="not rollback metadata"):
        RollbackMetadata.from_avro(RollbackPlan("1", "commit", {}).to_avro())


def test_rollback_plans_with_log_block_rollbacks_are_refused() -> None:
    record = {
        "instantToRollback": {"commitTime": "20250101000000000", "action": "deltacommit"},
        "RollbackRequests": [{
            "partitionPath": "p", "fileId": "f-0", "latestBaseInstant": "20240101000000000",
            "filesToBeDeleted": [], "logBlocksToBeDeleted": {"/t/p/.f-0_2024.log.1_0-1-0": 10},
        }],
        "version": 1,
    }
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(ROLLBACK_PLAN_SCHEMA), [record])
    with pytest.raises(UnsupportedTableError, match="rolls back log blocks"):
        RollbackPlan.from_avro(buffer.getvalue())
