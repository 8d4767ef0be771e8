"""``.hoodie/hoodie.properties``: the Java properties text and the typed table config.

memtier reads and writes table versions 6 (timeline layout 1), 8 and 9 (layout 2). Keys
follow what Spark + Hudi writes for each version (see ``shared/reference/hudi-format.md`` section 2);
:attr:`TableConfig.raw` keeps every key as read, so keys memtier does not model survive a
rewrite.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memtier.errors import (
    AlreadyExistsError,
    CorruptFileError,
    InvalidArgumentError,
    NotATableError,
    NotFoundError,
    TableExistsError,
    UnsupportedTableError,
)
from memtier.io import FileIO, join

__all__ = [
    "COPY_ON_WRITE",
    "DEFAULT_TABLE_VERSION",
    "MERGE_ON_READ",
    "TableConfig",
    "format_properties",
    "load_table_config",
    "parse_properties",
    "properties_path",
    "rewrite_table_config",
    "table_checksum",
    "write_table_config",
]

MERGE_ON_READ = "MERGE_ON_READ"
COPY_ON_WRITE = "COPY_ON_WRITE"

# Keys (table version 6 names unless marked).
NAME = "hoodie.table.name"
TYPE = "hoodie.table.type"
VERSION = "hoodie.table.version"
INITIAL_VERSION = "hoodie.table.initial.version"
LAYOUT_VERSION = "hoodie.timeline.layout.version"
RECORD_KEY_FIELDS = "hoodie.table.recordkey.fields"
PRECOMBINE_FIELD = "hoodie.table.precombine.field"
ORDERING_FIELDS = "hoodie.table.ordering.fields"  # v9 name, accepted when reading
PARTITION_FIELDS = "hoodie.table.partition.fields"
HIVE_STYLE = "hoodie.datasource.write.hive_style_partitioning"
URL_ENCODE = "hoodie.datasource.write.partitionpath.urlencode"
DROP_PARTITION_COLUMNS = "hoodie.datasource.write.drop.partition.columns"
KEY_GENERATOR_CLASS = "hoodie.table.keygenerator.class"
KEY_GENERATOR_TYPE = "hoodie.table.keygenerator.type"  # v8
MERGE_MODE = "hoodie.record.merge.mode"  # v8
MERGE_STRATEGY_ID = "hoodie.record.merge.strategy.id"  # v8
TIMELINE_PATH = "hoodie.timeline.path"  # v8
TIMELINE_HISTORY_PATH = "hoodie.timeline.history.path"  # v8
TABLE_FORMAT = "hoodie.table.format"  # v9
MULTIPLE_BASE_FORMATS = "hoodie.table.multiple.base.file.formats.enable"
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
METADATA_PARTITIONS_INFLIGHT = "hoodie.table.metadata.partitions.inflight"
#: The merge modes memtier applies: by ordering value (ties to the later write), by commit.
_MERGE_MODES = ("EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING")
BASE_FILE_FORMAT = "hoodie.table.base.file.format"
CREATE_SCHEMA = "hoodie.table.create.schema"
DATABASE_NAME = "hoodie.database.name"
POPULATE_META_FIELDS = "hoodie.populate.meta.fields"
CHECKSUM = "hoodie.table.checksum"
PAYLOAD_CLASS = "hoodie.compaction.payload.class"
MERGER_STRATEGY = "hoodie.compaction.record.merger.strategy"
TIMELINE_TIMEZONE = "hoodie.table.timeline.timezone"
ARCHIVELOG_FOLDER = "hoodie.archivelog.folder"
INDEX_TYPE = "hoodie.index.type"
BUCKETS = "hoodie.bucket.index.num.buckets"
BUCKET_HASH_FIELD = "hoodie.bucket.index.hash.field"
LOG_BLOCK_FORMAT = "hoodie.memtier.log.block.format"

_KEYGEN = "org.apache.hudi.keygen."
_KEY_GENERATOR_TYPES = {  # v8 hoodie.table.keygenerator.type -> the v6 class name
    "SIMPLE": _KEYGEN + "SimpleKeyGenerator",
    "COMPLEX": _KEYGEN + "ComplexKeyGenerator",
    "NON_PARTITION": _KEYGEN + "NonpartitionedKeyGenerator",
    "TIMESTAMP": _KEYGEN + "TimestampBasedKeyGenerator",
    "CUSTOM": _KEYGEN + "CustomKeyGenerator",
}
_EVENT_TIME_MERGER = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
_DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
_KEY_GENERATOR_TYPE_OF_CLASS = {cls: kind for kind, cls in _KEY_GENERATOR_TYPES.items()}
_LAYOUT_OF_VERSION = {6: 1, 8: 2, 9: 2}
#: The table version memtier creates unless told another.
DEFAULT_TABLE_VERSION = 6
#: The keys that name the ordering field and the key generator, by table version.
_ORDERING_KEY = {6: PRECOMBINE_FIELD, 8: PRECOMBINE_FIELD, 9: ORDERING_FIELDS}
#: What Hudi 1.0 (version 8) and 1.1+ (version 9) write at creation beyond version 6's
#: keys (event-time merging; the timeline's folders; where archived instants go).
_CREATED_KEYS = {
    6: {PAYLOAD_CLASS: _DEFAULT_PAYLOAD, MERGER_STRATEGY: _EVENT_TIME_MERGER, ARCHIVELOG_FOLDER: "archived"},
    8: {PAYLOAD_CLASS: _DEFAULT_PAYLOAD, MERGE_MODE: "EVENT_TIME_ORDERING", MERGE_STRATEGY_ID: _EVENT_TIME_MERGER,
        TIMELINE_PATH: "timeline", TIMELINE_HISTORY_PATH: "history", ARCHIVELOG_FOLDER: "archived",
        INITIAL_VERSION: "8"},
    9: {MERGE_MODE: "EVENT_TIME_ORDERING", TIMELINE_PATH: "timeline", TIMELINE_HISTORY_PATH: "history",
        ARCHIVELOG_FOLDER: "history", INITIAL_VERSION: "9", TABLE_FORMAT: "native"},
}
_LOG_BLOCK_FORMATS = ("avro", "parquet")
# Keys to_properties writes only when their field has a value (stale raw copies are dropped).
_OPTIONAL_KEYS = frozenset({
    RECORD_KEY_FIELDS, PRECOMBINE_FIELD, ORDERING_FIELDS, PARTITION_FIELDS, KEY_GENERATOR_CLASS,
    KEY_GENERATOR_TYPE, CREATE_SCHEMA, INDEX_TYPE, BUCKETS, BUCKET_HASH_FIELD,
})
_TABLE_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FIELD_NAME_RE = re.compile(r"[^,:\s]+")

# ======================================================================================
# java.util.Properties text
# ======================================================================================

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    """Natural lines joined at odd trailing backslashes; comments and blanks dropped."""
    lines: list[str] = []
    pending: str | None = None
    for natural in re.split(r"\r\n|\r|\n", text):
        if pending is None:
            stripped = natural.lstrip(_WHITESPACE)
            if not stripped or stripped[0] in "#!":
                continue
        else:
            stripped = natural.lstrip(_WHITESPACE)
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        continued = trailing % 2 == 1
        piece = stripped[:-1] if continued else stripped
        pending = piece if pending is None else pending + piece
        if not continued:
            lines.append(pending)
            pending = None
    if pending is not None:
        lines.append(pending)
    return lines


#: A key: up to the first unescaped ``=``, ``:`` or whitespace.
_KEY_RE = re.compile(r"(?:\\.?|[^=:\\ \t\f])*", re.DOTALL)


def _split_key(line: str) -> tuple[str, str]:
    """Split a logical line at the first unescaped ``=``, ``:`` or whitespace."""
    key = _KEY_RE.match(line).group()  # type: ignore[union-attr] - matches the empty string at least
    rest = line[len(key):]
    rest = rest.lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


#: One escape: a backslash and the character after it, or ``\\u`` and up to 4 more.
_ESCAPE_RE = re.compile(r"\\(u.{0,4}|.)", re.DOTALL)
_HEX = frozenset("0123456789abcdefABCDEF")


def _unescaped(match: re.Match[str]) -> str:
    escaped = match.group(1)
    if escaped[0] != "u":
        return _ESCAPES.get(escaped, escaped)
    digits = escaped[1:]
    if len(digits) != 4 or not _HEX.issuperset(digits):
        raise InvalidArgumentError(f"malformed \\uXXXX escape in properties: {match.string!r}")
    return chr(int(digits, 16))


def _unescape(text: str) -> str:
    """``text`` with its escapes resolved (a backslash ending it stays)."""
    # \uXXXX escapes are UTF-16 code units: rejoin surrogate pairs.
    return _ESCAPE_RE.sub(_unescaped, text).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``java.util.Properties`` text (comments, separators, escapes, continuations)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _escape(text: str, is_key: bool) -> str:
    out: list[str] = []
    for i, char in enumerate(text):
        if char == " " and (is_key or i == 0):
            out.append("\\ ")
        elif char in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
        elif char in "=:#!\\":
            out.append("\\" + char)
        elif " " <= char <= "~":
            out.append(char)
        else:
            for unit in range(0, len(encoded := char.encode("utf-16-be")), 2):
                out.append(f"\\u{int.from_bytes(encoded[unit:unit + 2], 'big'):04X}")
    return "".join(out)


def format_properties(props: Mapping[str, str]) -> str:
    """Properties text as Java's ``Properties.store`` escapes it, keys sorted, pure ASCII."""
    return "".join(f"{_escape(k, True)}={_escape(v, False)}\n" for k, v in sorted(props.items()))


def table_checksum(database: str, table: str) -> int:
    """``hoodie.table.checksum``: CRC32 of ``"<database>.<table>"`` (UTF-8), unsigned."""
    return zlib.crc32(f"{database}.{table}".encode())


# ======================================================================================
# Typed table config
# ======================================================================================


def _split_fields(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    # CustomKeyGenerator partition fields read "field:type"; the column is the part before ":".
    return tuple(part.strip().split(":")[0] for part in value.split(",") if part.strip())


def _flag(props: Mapping[str, str], key: str, default: bool, path: str) -> bool:
    value = props.get(key)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise UnsupportedTableError(f"{key}={value!r} at {path} is not true/false")
    return value.strip().lower() == "true"


def _int(props: Mapping[str, str], key: str, path: str) -> int | None:
    value = props.get(key)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise UnsupportedTableError(f"{key}={value!r} at {path} is not an integer") from None


def _required_int(props: Mapping[str, str], key: str, path: str) -> int:
    value = _int(props, key, path)
    if value is None:
        raise UnsupportedTableError(f"hoodie.properties at {path} has no {key}")
    return value


def _check_versions(props: Mapping[str, str], path: str) -> tuple[int, int]:
    version = _required_int(props, VERSION, path)
    if version not in _LAYOUT_OF_VERSION:
        raise UnsupportedTableError(
            f"table version {version} at {path} is not supported (memtier reads and writes 6, 8 and 9)"
        )
    layout = _required_int(props, LAYOUT_VERSION, path)
    if layout != _LAYOUT_OF_VERSION[version]:
        raise UnsupportedTableError(
            f"{LAYOUT_VERSION}={layout} at {path} does not fit table version {version}"
            f" (expected {_LAYOUT_OF_VERSION[version]})"
        )
    return version, layout


def _ordering_field(props: Mapping[str, str], path: str) -> str | None:
    fields = _split_fields(props.get(ORDERING_FIELDS) or props.get(PRECOMBINE_FIELD))
    if len(fields) > 1:
        raise UnsupportedTableError(
            f"table at {path} orders records by several fields {list(fields)};"
            " memtier supports one ordering field"
        )
    return fields[0] if fields else None


def _key_generator(props: Mapping[str, str]) -> str | None:
    if KEY_GENERATOR_CLASS in props:
        return props[KEY_GENERATOR_CLASS].strip() or None
    kind = props.get(KEY_GENERATOR_TYPE, "").strip().upper()
    return _KEY_GENERATOR_TYPES.get(kind)


def _new_key_generator(record_key_fields: Sequence[str], partition_fields: Sequence[str]) -> str:
    if not partition_fields:
        return _KEYGEN + "NonpartitionedKeyGenerator"
    if len(record_key_fields) <= 1 and len(partition_fields) == 1:
        return _KEYGEN + "SimpleKeyGenerator"
    return _KEYGEN + "ComplexKeyGenerator"


def _check_new_fields(what: str, fields: Sequence[str]) -> tuple[str, ...]:
    fields = tuple(fields)
    for name in fields:
        if not isinstance(name, str) or not _FIELD_NAME_RE.fullmatch(name):
            raise InvalidArgumentError(f"{what} {name!r} is not a usable column name")
    if len(set(fields)) != len(fields):
        raise InvalidArgumentError(f"{what} {list(fields)} name a column twice")
    return fields


@dataclass(frozen=True)
class TableConfig:
    """The table's ``hoodie.properties`` as typed values (plus every raw key)."""

    name: str
    table_type: str
    version: int
    timeline_layout_version: int
    record_key_fields: tuple[str, ...]
    ordering_field: str | None
    partition_fields: tuple[str, ...]
    hive_style_partitioning: bool
    url_encode_partitions: bool
    drop_partition_columns: bool
    key_generator_class: str | None
    base_file_format: str
    create_schema: str | None
    database_name: str
    populate_meta_fields: bool
    buckets: int | None
    log_block_format: str
    #: Hudi 1.x's ``hoodie.record.merge.mode`` (None when the table does not say: event
    #: time with an ordering field, as version 6 payloads merge)
    merge_mode: str | None = None
    raw: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_merge_on_read(self) -> bool:
        return self.table_type == MERGE_ON_READ

    @classmethod
    def from_properties(cls, props: Mapping[str, str], path: str) -> TableConfig:
        """Validate and type ``props`` of the table at ``path`` (named in every error)."""
        name = props.get(NAME, "").strip()
        if not name:
            raise NotATableError(f"hoodie.properties at {path} has no {NAME}")
        version, layout = _check_versions(props, path)
        table_type = props.get(TYPE, COPY_ON_WRITE).strip().upper()  # Java's default
        if table_type not in (MERGE_ON_READ, COPY_ON_WRITE):
            raise UnsupportedTableError(
                f"{TYPE}={props[TYPE]!r} at {path} is not a Hudi table type"
            )
        database = props.get(DATABASE_NAME, "")
        checksum = _int(props, CHECKSUM, path)
        if checksum is not None and checksum != table_checksum(database, name):
            raise CorruptFileError(
                properties_path(path), 0,
                f"{CHECKSUM}={checksum} but CRC32({database}.{name}) is"
                f" {table_checksum(database, name)}",
            )
        base_format = props.get(BASE_FILE_FORMAT, "PARQUET").strip().upper()
        if base_format != "PARQUET" or _flag(props, MULTIPLE_BASE_FORMATS, False, path):
            raise UnsupportedTableError(
                f"table at {path} has {base_format} base files ({BASE_FILE_FORMAT}"
                f"{', ' + MULTIPLE_BASE_FORMATS + '=true' if base_format == 'PARQUET' else ''});"
                " memtier reads and writes Parquet base files only (Lance, ORC and HFile are not read)"
            )
        merge_mode = props.get(MERGE_MODE, "").strip().upper() or None
        if merge_mode not in (None, *_MERGE_MODES):
            raise UnsupportedTableError(
                f"{MERGE_MODE}={props[MERGE_MODE]!r} at {path}: memtier merges records by event time"
                f" or commit time ({', '.join(_MERGE_MODES)}), not with a custom merger"
            )
        log_block_format = props.get(LOG_BLOCK_FORMAT, "avro").strip().lower()
        if log_block_format not in _LOG_BLOCK_FORMATS:
            raise UnsupportedTableError(
                f"{LOG_BLOCK_FORMAT}={log_block_format!r} at {path}"
                f" is not one of {_LOG_BLOCK_FORMATS}"
            )
        return cls(
            name=name,
            table_type=table_type,
            version=version,
            timeline_layout_version=layout,
            record_key_fields=_split_fields(props.get(RECORD_KEY_FIELDS)),
            ordering_field=_ordering_field(props, path),
            partition_fields=_split_fields(props.get(PARTITION_FIELDS)),
            hive_style_partitioning=_flag(props, HIVE_STYLE, False, path),
            url_encode_partitions=_flag(props, URL_ENCODE, False, path),
            drop_partition_columns=_flag(props, DROP_PARTITION_COLUMNS, False, path),
            key_generator_class=_key_generator(props),
            base_file_format=base_format,
            create_schema=props.get(CREATE_SCHEMA) or None,
            database_name=database,
            populate_meta_fields=_flag(props, POPULATE_META_FIELDS, True, path),
            buckets=_int(props, BUCKETS, path),
            log_block_format=log_block_format,
            merge_mode=merge_mode,
            raw=dict(props),
        )

    @classmethod
    def new(
        cls,
        name: str,
        table_type: str,
        record_key_fields: Sequence[str],
        ordering_field: str | None,
        partition_fields: Sequence[str],
        buckets: int | None,
        create_schema: str | None,
        log_block_format: str = "avro",
        *,
        database_name: str = "default",
        version: int = DEFAULT_TABLE_VERSION,
    ) -> TableConfig:
        """The config memtier creates: table ``version`` 6 (layout 1), 8 or 9 (layout 2),
        hive-style partitions, event-time merging (DefaultHoodieRecordPayload, the
        event-time merger; Hudi 1.x's merge mode), UTC timeline, Parquet base files, a
        bucket index when ``buckets`` is set. Without record-key fields (an append-only
        table) ``buckets`` is the file groups per partition and readers are told to
        append, not merge."""
        if version not in _LAYOUT_OF_VERSION or isinstance(version, bool):
            raise InvalidArgumentError(
                f"table_version must be one of {sorted(_LAYOUT_OF_VERSION)}, got {version!r}"
            )
        if not isinstance(name, str) or not _TABLE_NAME_RE.fullmatch(name):
            raise InvalidArgumentError(
                f"table name {name!r} must be letters, digits and _ (not starting with a digit)"
            )
        if table_type not in (MERGE_ON_READ, COPY_ON_WRITE):
            raise InvalidArgumentError(
                f"table type {table_type!r} must be {MERGE_ON_READ} or {COPY_ON_WRITE}"
            )
        keys = _check_new_fields("record key field", record_key_fields)
        partitions = _check_new_fields("partition field", partition_fields)
        if ordering_field is not None:
            _check_new_fields("ordering field", (ordering_field,))
        if buckets is not None:
            if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 1:
                raise InvalidArgumentError(f"buckets must be a positive int, got {buckets!r}")
        if log_block_format not in _LOG_BLOCK_FORMATS:
            raise InvalidArgumentError(
                f"log_block_format {log_block_format!r} must be one of {_LOG_BLOCK_FORMATS}"
            )
        return cls(
            name=name,
            table_type=table_type,
            version=version,
            timeline_layout_version=_LAYOUT_OF_VERSION[version],
            record_key_fields=keys,
            ordering_field=ordering_field,
            partition_fields=partitions,
            hive_style_partitioning=True,
            url_encode_partitions=False,
            drop_partition_columns=False,
            key_generator_class=_new_key_generator(keys, partitions),
            base_file_format="PARQUET",
            create_schema=create_schema,
            database_name=database_name,
            populate_meta_fields=True,
            buckets=buckets,
            log_block_format=log_block_format,
            merge_mode=_CREATED_KEYS[version].get(MERGE_MODE),
            raw={**_CREATED_KEYS[version], TIMELINE_TIMEZONE: "UTC"},
        )

    def to_properties(self) -> dict[str, str]:
        """Every raw key, overridden by the typed fields (under the key names of the
        table's version: the ordering field as ``precombine.field`` up to version 8,
        ``ordering.fields`` from 9; the key generator as a class name in version 6, a
        type from 8)."""
        props = {k: v for k, v in self.raw.items() if k not in _OPTIONAL_KEYS}
        props.update({
            NAME: self.name,
            TYPE: self.table_type,
            VERSION: str(self.version),
            LAYOUT_VERSION: str(self.timeline_layout_version),
            HIVE_STYLE: _bool_text(self.hive_style_partitioning),
            URL_ENCODE: _bool_text(self.url_encode_partitions),
            DROP_PARTITION_COLUMNS: _bool_text(self.drop_partition_columns),
            BASE_FILE_FORMAT: self.base_file_format,
            DATABASE_NAME: self.database_name,
            POPULATE_META_FIELDS: _bool_text(self.populate_meta_fields),
            LOG_BLOCK_FORMAT: self.log_block_format,
            CHECKSUM: str(table_checksum(self.database_name, self.name)),
        })
        optional = {
            RECORD_KEY_FIELDS: self._fields_text(RECORD_KEY_FIELDS, self.record_key_fields),
            _ORDERING_KEY[self.version]: self.ordering_field,
            PARTITION_FIELDS: self._fields_text(PARTITION_FIELDS, self.partition_fields),
            CREATE_SCHEMA: self.create_schema,
            **self._key_generator_keys(),
        }
        if self.buckets is not None:
            optional[BUCKETS] = str(self.buckets)
            if self.record_key_fields:
                optional.update({INDEX_TYPE: "BUCKET", BUCKET_HASH_FIELD: ",".join(self.record_key_fields)})
        props.update({k: v for k, v in optional.items() if v})
        return props

    def _key_generator_keys(self) -> dict[str, str | None]:
        """The key generator as the table's version names it: the class (version 6), the
        type (8 and 9; the class too when the table had it, or has no type for it)."""
        if self.version == 6:
            return {KEY_GENERATOR_CLASS: self.key_generator_class}
        kind = _KEY_GENERATOR_TYPE_OF_CLASS.get(self.key_generator_class or "")
        keep_class = KEY_GENERATOR_CLASS in self.raw or kind is None
        return {KEY_GENERATOR_TYPE: kind, KEY_GENERATOR_CLASS: self.key_generator_class if keep_class else None}

    def _fields_text(self, key: str, fields: tuple[str, ...]) -> str:
        """The raw text when it still names ``fields`` (keeps ``field:type`` forms), else a list."""
        raw = self.raw.get(key, "")
        return raw if _split_fields(raw) == fields else ",".join(fields)


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def properties_path(base_path: str) -> str:
    """Where the table at ``base_path`` keeps ``hoodie.properties``."""
    return join(base_path, ".hoodie", "hoodie.properties")


def load_table_config(io: FileIO, base_path: str) -> TableConfig:
    """Read and validate the config of the table at ``base_path``."""
    path = properties_path(base_path)
    try:
        data = io.read_bytes(path)
    except NotFoundError as e:
        raise NotATableError(
            f"no Hudi table at {base_path} (missing .hoodie/hoodie.properties)"
        ) from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # what Java's Properties.load(InputStream) assumes
    try:
        props = parse_properties(text)
    except InvalidArgumentError as e:
        raise CorruptFileError(path, 0, str(e)) from e
    return TableConfig.from_properties(props, base_path)


def rewrite_table_config(io: FileIO, base_path: str, config: TableConfig) -> None:
    """Replace the ``hoodie.properties`` of an existing table, atomically (Hadoop's local
    ``.crc`` sidecar of the old file is deleted first: it would fail Hudi's read of the new one)."""
    path = properties_path(base_path)
    io.delete(join(base_path, ".hoodie", ".hoodie.properties.crc"))
    io.write_atomic(path, format_properties(config.to_properties()).encode("ascii"))


def write_table_config(io: FileIO, base_path: str, config: TableConfig) -> None:
    """Create ``hoodie.properties`` for a new table; :class:`TableExistsError` if present."""
    text = format_properties(config.to_properties())
    try:
        io.create_exclusive(properties_path(base_path), text.encode("ascii"))
    except AlreadyExistsError as e:
        raise TableExistsError(f"a Hudi table already exists at {base_path}") from e
