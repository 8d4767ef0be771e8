"""The WAL format: bytes <-> header, frames and seal, each checked by CRC32C. No I/O.

* :mod:`~memtier.wal.format.layout` - the byte layout (described there) and its types;
* :mod:`~memtier.wal.format.encode` - writing records;
* :mod:`~memtier.wal.format.records` - parsing one header or record;
* :mod:`~memtier.wal.format.bitflips` - one-bit repairs of record headers;
* :mod:`~memtier.wal.format.tails` - torn tails against damage;
* :mod:`~memtier.wal.format.blockfile` - block files, and frames at known places;
* :mod:`~memtier.wal.format.streams` - stream segments.
"""

from memtier.wal.format.blockfile import decode_frames_at, decode_wal
from memtier.wal.format.encode import (
    encode_declaration,
    encode_frame,
    encode_header,
    encode_seal,
    frame_payload,
    frame_record,
    rows_record,
    selection_record,
)
from memtier.wal.format.layout import (
    FORMAT_VERSION,
    HEADER_PREFIX_SIZE,
    MAGIC,
    READABLE_VERSIONS,
    RECORD_HEADER_SIZE,
    RECORD_MAGIC,
    SEAL_RECORD_SIZE,
    U64_MAX,
    RecordKind,
    Selection,
    WalContents,
    WalFrame,
    WalHeader,
    WalKind,
    WalSeal,
    check_schema,
)
from memtier.wal.format.records import decode_header, decode_seal_record, header_length
from memtier.wal.format.streams import (
    DeclaredBlock,
    StreamBlock,
    StreamContents,
    declared_blocks,
    decode_stream,
)

__all__ = [
    "DeclaredBlock",
    "FORMAT_VERSION",
    "HEADER_PREFIX_SIZE",
    "MAGIC",
    "READABLE_VERSIONS",
    "RECORD_HEADER_SIZE",
    "RECORD_MAGIC",
    "RecordKind",
    "SEAL_RECORD_SIZE",
    "Selection",
    "StreamBlock",
    "StreamContents",
    "U64_MAX",
    "WalContents",
    "WalFrame",
    "WalHeader",
    "WalKind",
    "WalSeal",
    "check_schema",
    "declared_blocks",
    "decode_frames_at",
    "decode_header",
    "decode_seal_record",
    "decode_stream",
    "decode_wal",
    "encode_declaration",
    "encode_frame",
    "encode_header",
    "encode_seal",
    "frame_payload",
    "frame_record",
    "header_length",
    "rows_record",
    "selection_record",
]
