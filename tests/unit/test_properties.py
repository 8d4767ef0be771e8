"""hoodie.properties: Java properties text, the typed config, reading and writing it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtier.errors import (
    CorruptFileError,
    InvalidArgumentError,
    NotATableError,
    TableExistsError,
    UnsupportedTableError,
)
from memtier.hudi.properties import (
    COPY_ON_WRITE,
    MERGE_ON_READ,
    TableConfig,
    format_properties,
    load_table_config,
    parse_properties,
    properties_path,
    table_checksum,
    write_table_config,
)
from memtier.io import FileIO, open_fileio
from tests.support.samples import SAMPLES, Sample, unpack

SCHEMA = json.dumps({
    "type": "record",
    "name": "trips_record",
    "namespace": "hoodie.trips",
    "fields": [
        {"name": "uuid", "type": ["null", "string"], "default": None},
        {"name": "ts", "type": ["null", "long"], "default": None},
        {"name": "city", "type": ["null", "string"], "default": None},
        {"name": "fare", "type": ["null", "double"], "default": None},
    ],
})


def _config(**overrides: object) -> TableConfig:
    args: dict[str, object] = {
        "name": "trips",
        "table_type": MERGE_ON_READ,
        "record_key_fields": ("uuid",),
        "ordering_field": "ts",
        "partition_fields": ("city",),
        "buckets": 4,
        "create_schema": SCHEMA,
    }
    args.update(overrides)
    return TableConfig.new(**args)  # type: ignore[arg-type]


V6 = {
    "hoodie.table.name": "t",
    "hoodie.table.type": "MERGE_ON_READ",
    "hoodie.table.version": "6",
    "hoodie.timeline.layout.version": "1",
}

# --- java.util.Properties text -----------------------------------------------------------


def test_parse_handles_comments_separators_and_escapes() -> None:
    text = (
        "#Properties saved on 2025-03-31T03:06:42.363296Z\n"
        "  ! another comment\n"
        "\n"
        "a=1\n"
        "b:2\n"
        "c 3\n"
        "d  =  spaced value  \n"
        'e={"type"\\:"record"}\n'
        "f=x\\=y\\\\z\\#\\!\n"
        "g=caf\\u00e9 \\uD83D\\uDE00\n"
        "key\\ with\\ spaces=v\n"
        "h=tab\\there\\nnewline\n"
        "i=\n"
        "j\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "spaced value  ",
        "e": '{"type":"record"}',
        "f": "x=y\\z#!",
        "g": "café 😀",
        "key with spaces": "v",
        "h": "tab\there\nnewline",
        "i": "",
        "j": "",
    }


def test_parse_joins_continued_lines() -> None:
    text = "a=one \\\n    two\\\n\tthree\r\nb=x\\\\\nc=y\r# not continued \\\nd=z"
    assert parse_properties(text) == {"a": "one twothree", "b": "x\\", "c": "y", "d": "z"}


def test_parse_rejects_malformed_unicode_escape() -> None:
    with pytest.raises(InvalidArgumentError, match="uXXXX"):
        parse_properties("a=\\u12G4")


def test_format_escapes_like_java_and_sorts() -> None:
    text = format_properties({"z": "last", " k:e=y": " v=a:l#u!e\\ é\n"})
    assert text == "\\ k\\:e\\=y=\\ v\\=a\\:l\\#u\\!e\\\\ \\u00E9\\n\nz=last\n"
    assert text.isascii()


def test_format_writes_schema_colons_like_spark() -> None:
    assert format_properties({"s": '{"type":"record"}'}) == 's={"type"\\:"record"}\n'


@given(st.dictionaries(st.text(min_size=1), st.text()))
def test_format_then_parse_round_trips(props: dict[str, str]) -> None:
    assert parse_properties(format_properties(props)) == props


@given(st.dictionaries(st.text(min_size=1), st.text()))
def test_formatted_lines_have_exactly_one_unescaped_equals(props: dict[str, str]) -> None:
    for line in format_properties(props).splitlines():
        unescaped = [i for i, c in enumerate(line) if c == "=" and not _escaped(line, i)]
        assert len(unescaped) == 1, line


def _escaped(line: str, i: int) -> bool:
    backslashes = len(line[:i]) - len(line[:i].rstrip("\\"))
    return backslashes % 2 == 1


def test_table_checksum_is_crc32_of_database_dot_table() -> None:
    assert table_checksum("default", "v6_trips_8i1u") == 3843273058


# --- the samples ---------------------------------------------------------------------------


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_every_sample_loads(sample: Sample, tmp_path: Path) -> None:
    table = unpack(sample, tmp_path)
    config = load_table_config(open_fileio(str(table)), str(table))
    assert config.name == sample.name
    assert config.version == sample.version
    assert config.timeline_layout_version == {6: 1, 8: 2}[sample.version]
    assert config.table_type == sample.table_type
    assert config.is_merge_on_read == (sample.table_type == MERGE_ON_READ)
    assert config.key_generator_class is not None
    assert config.key_generator_class.startswith("org.apache.hudi.keygen.")
    assert config.record_key_fields
    assert config.create_schema is not None and json.loads(config.create_schema)["type"] == "record"
    assert config.database_name == "default"
    assert int(config.raw["hoodie.table.checksum"]) == table_checksum("default", config.name)
    assert config.log_block_format == "avro" and config.buckets is None


def test_sample_specific_values(tmp_path: Path) -> None:
    by_id = {s.id: s for s in SAMPLES}

    def load(sample_id: str) -> TableConfig:
        table = unpack(by_id[sample_id], tmp_path / sample_id)
        return load_table_config(open_fileio(str(table)), str(table))

    trips = load("quickstart_trips_table-mor-avro-v6_trips_8i1u")
    assert (trips.record_key_fields, trips.ordering_field, trips.partition_fields) == (
        ("uuid",), "ts", ("city",)
    )
    assert trips.hive_style_partitioning and not trips.url_encode_partitions
    complex_keys = load("sample_table-cow-v6_complexkeygen_hivestyle")
    assert complex_keys.record_key_fields == ("id", "name")
    assert complex_keys.partition_fields == ("byteField", "shortField")
    assert not load("sample_table-cow-v6_simplekeygen_nonhivestyle").hive_style_partitioning
    assert not load("sample_table-cow-v6_simplekeygen_hivestyle_no_metafields").populate_meta_fields
    assert load("sample_table-cow-v6_empty").ordering_field is None
    v8 = load("sample_table-cow-v8_simplekeygen_nonhivestyle")  # keygenerator.type=SIMPLE
    assert v8.key_generator_class == "org.apache.hudi.keygen.SimpleKeyGenerator"
    assert v8.ordering_field == "longField"
    v8_unpartitioned = load("sample_table-cow-v8_nonpartitioned")
    assert v8_unpartitioned.key_generator_class == "org.apache.hudi.keygen.NonpartitionedKeyGenerator"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_samples_rewrite_every_key_they_had(sample: Sample, tmp_path: Path) -> None:
    table = unpack(sample, tmp_path)
    config = load_table_config(open_fileio(str(table)), str(table))
    props = config.to_properties()
    assert {k: props.get(k) for k in config.raw} == dict(config.raw)
    assert TableConfig.from_properties(parse_properties(format_properties(props)), "x") == config


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [5, 7, 10])
def test_other_table_versions_are_refused(version: int) -> None:
    props = {**V6, "hoodie.table.version": str(version)}
    with pytest.raises(UnsupportedTableError) as raised:
        TableConfig.from_properties(props, "/data/t")
    assert str(raised.value) == (
        f"table version {version} at /data/t is not supported (memtier reads and writes 6, 8 and 9)"
    )


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        ({"hoodie.table.name": None}, NotATableError, "hoodie.table.name"),
        ({"hoodie.table.version": None}, UnsupportedTableError, "hoodie.table.version"),
        ({"hoodie.timeline.layout.version": None}, UnsupportedTableError, "hoodie.timeline.layout.version"),
        ({"hoodie.timeline.layout.version": "2"}, UnsupportedTableError, "does not fit table version 6"),
        ({"hoodie.table.version": "six"}, UnsupportedTableError, "not an integer"),
        ({"hoodie.table.type": "MERGE_ON_WRITE"}, UnsupportedTableError, "hoodie.table.type"),
        ({"hoodie.datasource.write.hive_style_partitioning": "yes"}, UnsupportedTableError, "true/false"),
        ({"hoodie.table.precombine.field": "a,b"}, UnsupportedTableError, "several fields"),
        ({"hoodie.memtier.log.block.format": "orc"}, UnsupportedTableError, "log.block.format"),
        ({"hoodie.table.checksum": "1"}, CorruptFileError, "CRC32"),
        ({"hoodie.table.base.file.format": "LANCE"}, UnsupportedTableError, "LANCE base files"),
        ({"hoodie.table.multiple.base.file.formats.enable": "true"}, UnsupportedTableError,
         "multiple.base.file.formats.enable=true"),
        ({"hoodie.record.merge.mode": "CUSTOM"}, UnsupportedTableError, "not with a custom merger"),
    ],
)
def test_bad_properties_are_refused_naming_key_and_path(
    change: dict[str, str | None], error: type[Exception], words: str
) -> None:
    props = {**V6, **change}
    props = {k: v for k, v in props.items() if v is not None}
    with pytest.raises(error, match=words) as raised:
        TableConfig.from_properties(props, "/data/t")
    assert "/data/t" in str(raised.value)


def test_defaults_follow_java() -> None:
    config = TableConfig.from_properties({k: v for k, v in V6.items() if k != "hoodie.table.type"}, "p")
    assert config.table_type == COPY_ON_WRITE
    assert config.base_file_format == "PARQUET"
    assert config.populate_meta_fields and not config.hive_style_partitioning
    assert config.record_key_fields == () and config.ordering_field is None
    assert config.database_name == ""


def test_v9_ordering_fields_key_is_read() -> None:
    props = {**V6, "hoodie.table.ordering.fields": "ts", "hoodie.table.precombine.field": "old"}
    assert TableConfig.from_properties(props, "p").ordering_field == "ts"


@pytest.mark.parametrize("mode", ["EVENT_TIME_ORDERING", "commit_time_ordering", None])
def test_merge_mode_is_read(mode: str | None) -> None:
    props = {**V6, **({"hoodie.record.merge.mode": mode} if mode else {})}
    assert TableConfig.from_properties(props, "p").merge_mode == (mode.upper() if mode else None)


def test_custom_keygen_partition_types_are_stripped_but_kept_on_rewrite() -> None:
    props = {**V6, "hoodie.table.partition.fields": "region:simple,day:timestamp"}
    config = TableConfig.from_properties(props, "p")
    assert config.partition_fields == ("region", "day")
    assert config.to_properties()["hoodie.table.partition.fields"] == "region:simple,day:timestamp"


# --- what memtier creates -------------------------------------------------------------------


def test_new_config_has_the_keys_readers_need() -> None:
    props = _config().to_properties()
    assert props == {
        "hoodie.table.name": "trips",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": "6",
        "hoodie.timeline.layout.version": "1",
        "hoodie.table.recordkey.fields": "uuid",
        "hoodie.table.precombine.field": "ts",
        "hoodie.table.partition.fields": "city",
        "hoodie.datasource.write.hive_style_partitioning": "true",
        "hoodie.datasource.write.partitionpath.urlencode": "false",
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
        "hoodie.table.base.file.format": "PARQUET",
        "hoodie.table.create.schema": SCHEMA,
        "hoodie.database.name": "default",
        "hoodie.table.checksum": str(table_checksum("default", "trips")),
        "hoodie.populate.meta.fields": "true",
        "hoodie.compaction.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
        "hoodie.compaction.record.merger.strategy": "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5",
        "hoodie.table.timeline.timezone": "UTC",
        "hoodie.archivelog.folder": "archived",
        "hoodie.index.type": "BUCKET",
        "hoodie.bucket.index.num.buckets": "4",
        "hoodie.bucket.index.hash.field": "uuid",
        "hoodie.memtier.log.block.format": "avro",
    }


def test_new_config_of_versions_8_and_9_names_keys_as_hudi_1x_does() -> None:
    """Hudi 1.0 (version 8) and 1.1+ (version 9) key names: the key generator's type,
    the merge mode, the timeline's folders; version 9 names the ordering field
    ``ordering.fields`` and archives into the timeline's history."""
    v6 = _config().to_properties()
    v8 = _config(version=8).to_properties()
    v9 = _config(version=9).to_properties()
    common = {k: v for k, v in v6.items() if k not in (
        "hoodie.table.version", "hoodie.timeline.layout.version", "hoodie.table.keygenerator.class",
        "hoodie.compaction.record.merger.strategy", "hoodie.table.precombine.field", "hoodie.archivelog.folder",
        "hoodie.compaction.payload.class")}
    layout2 = {"hoodie.timeline.layout.version": "2", "hoodie.table.keygenerator.type": "SIMPLE",
               "hoodie.record.merge.mode": "EVENT_TIME_ORDERING", "hoodie.timeline.path": "timeline",
               "hoodie.timeline.history.path": "history"}
    assert v8 == {**common, **layout2, "hoodie.table.version": "8", "hoodie.table.initial.version": "8",
                  "hoodie.table.precombine.field": "ts", "hoodie.archivelog.folder": "archived",
                  "hoodie.record.merge.strategy.id": "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5",
                  "hoodie.compaction.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload"}
    assert v9 == {**common, **layout2, "hoodie.table.version": "9", "hoodie.table.initial.version": "9",
                  "hoodie.table.ordering.fields": "ts", "hoodie.archivelog.folder": "history",
                  "hoodie.table.format": "native"}
    for props in (v8, v9):
        assert TableConfig.from_properties(props, "x").ordering_field == "ts"
        assert TableConfig.from_properties(props, "x").key_generator_class == "org.apache.hudi.keygen.SimpleKeyGenerator"


@pytest.mark.parametrize("version", [5, 7, 10, "9", True])
def test_new_config_refuses_other_versions(version: object) -> None:
    with pytest.raises(InvalidArgumentError, match="table_version must be one of"):
        _config(version=version)


@pytest.mark.parametrize(
    ("keys", "partitions", "generator"),
    [
        (("uuid",), ("city",), "SimpleKeyGenerator"),
        (("uuid", "ts"), ("city",), "ComplexKeyGenerator"),
        (("uuid",), ("city", "day"), "ComplexKeyGenerator"),
        (("uuid",), (), "NonpartitionedKeyGenerator"),
        (("uuid", "ts"), (), "NonpartitionedKeyGenerator"),
        ((), ("city",), "SimpleKeyGenerator"),
    ],
)
def test_new_config_picks_the_key_generator(
    keys: tuple[str, ...], partitions: tuple[str, ...], generator: str
) -> None:
    config = _config(record_key_fields=keys, partition_fields=partitions, buckets=None)
    assert config.key_generator_class == f"org.apache.hudi.keygen.{generator}"


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"name": "1trips"}, "table name"),
        ({"name": "my-table"}, "table name"),
        ({"table_type": "mor"}, "table type"),
        ({"record_key_fields": ("a,b",)}, "record key field"),
        ({"record_key_fields": ("a", "a")}, "twice"),
        ({"partition_fields": ("",)}, "partition field"),
        ({"ordering_field": "a:b"}, "ordering field"),
        ({"buckets": 0}, "buckets"),
        ({"buckets": True}, "buckets"),
        ({"log_block_format": "orc"}, "log_block_format"),
    ],
)
def test_new_config_refuses_bad_arguments(overrides: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        _config(**overrides)


def test_an_append_only_table_keeps_its_file_group_count_without_a_bucket_index(
    fileio: FileIO, any_root: str
) -> None:
    """No record key: the bucket count is how many file groups a partition has; no
    bucket index (it would hash keys) and no record-key fields are written."""
    config = _config(record_key_fields=(), buckets=4)
    write_table_config(fileio, any_root, config)
    text = fileio.read_bytes(properties_path(any_root)).decode()
    assert "hoodie.bucket.index.num.buckets=4" in text
    assert "hoodie.index.type" not in text and "hoodie.table.recordkey.fields" not in text
    assert load_table_config(fileio, any_root).buckets == 4


def test_write_then_load_round_trips(fileio: FileIO, any_root: str) -> None:
    config = _config(log_block_format="parquet", table_type=COPY_ON_WRITE)
    write_table_config(fileio, any_root, config)
    loaded = load_table_config(fileio, any_root)
    assert loaded == config
    assert loaded.log_block_format == "parquet" and loaded.buckets == 4
    assert fileio.read_bytes(properties_path(any_root)).isascii()


def test_writing_over_an_existing_table_fails(fileio: FileIO, any_root: str) -> None:
    write_table_config(fileio, any_root, _config())
    with pytest.raises(TableExistsError, match=any_root):
        write_table_config(fileio, any_root, _config(name="other"))
    assert load_table_config(fileio, any_root).name == "trips"


def test_missing_properties_is_not_a_table(fileio: FileIO, any_root: str) -> None:
    with pytest.raises(NotATableError) as raised:
        load_table_config(fileio, any_root)
    assert str(raised.value) == f"no Hudi table at {any_root} (missing .hoodie/hoodie.properties)"


# --- hudi-rs accepts our keys ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("table_type", "partitions", "buckets"),
    [(MERGE_ON_READ, ("city",), 4), (COPY_ON_WRITE, (), None), (MERGE_ON_READ, ("city", "uuid"), None)],
)
def test_hudi_rs_opens_an_empty_table_of_our_properties(
    tmp_path: Path, table_type: str, partitions: tuple[str, ...], buckets: int | None
) -> None:
    hudi = pytest.importorskip("hudi")
    base = str(tmp_path / "trips")
    write_table_config(
        open_fileio(base), base,
        _config(table_type=table_type, partition_fields=partitions, buckets=buckets),
    )
    assert sorted(p.name for p in (tmp_path / "trips").rglob("*")) == [".hoodie", "hoodie.properties"]
    table = hudi.HudiTableBuilder.from_base_uri(base).build()
    assert table.table_type == table_type
    assert table.is_mor == (table_type == MERGE_ON_READ)
    assert table.get_schema().names == ["uuid", "ts", "city", "fare"]
    assert sum(batch.num_rows for batch in table.read(hudi.HudiReadOptions())) == 0
