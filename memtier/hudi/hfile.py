"""HFile version 3, as Hudi's metadata table stores its records: writing, and reading back.

An HFile is a sorted run of key/value cells in blocks, each block a 33-byte header
(magic, on-disk and uncompressed sizes, offset of the previous block of its kind,
checksum type, bytes per checksum, on-disk size with header), its body and CRC32
checksums of header and body in chunks; then the load-on-open section (root data index,
an empty meta index, the file info as a ``PBUF`` protobuf map) and a fixed-size 4096-byte
trailer (``TRABLK"$`` + a length-delimited protobuf ``TrailerProto``, the version int
``0x03000003`` last). A cell is HBase's KeyValue: key length, value length, the key (row
length, row, family length 0, timestamp ``Long.MAX_VALUE``, type 4 = Put), the value and
a memstore timestamp of 0. Blocks are not compressed (codec NONE), which Hudi's native
HFile reader and HBase's both read. The layout was taken from files Apache Hudi 1.0.2
writes (``.hoodie/metadata/files`` log blocks).

:func:`read_hfile` reads what :func:`write_hfile` writes (and uncompressed or gzip HFiles
of one index level), for tests and checks.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterable, Mapping
from itertools import pairwise

from memtier.errors import CorruptFileError, InvalidArgumentError

__all__ = ["read_hfile", "write_hfile"]

HEADER_SIZE = 33
TRAILER_SIZE = 4096
TRAILER_VERSION = (3 << 24) | 3  # minor 3 (protobuf trailer, checksums), major 3
BYTES_PER_CHECKSUM = 16 * 1024
CHECKSUM_CRC32 = 1
CODEC_GZ, CODEC_NONE = 1, 2  # HBase's Compression.Algorithm ordinals
BLOCK_TARGET = 64 * 1024
LATEST_TIMESTAMP = (1 << 63) - 1
PUT = 4
COMPARATOR = "org.apache.hudi.io.storage.HoodieHBaseKVComparator"
DATA, ROOT_INDEX, FILE_INFO = b"DATABLK*", b"IDXROOT2", b"FILEINF2"
TRAILER_MAGIC = b'TRABLK"$'
PB_MAGIC = b"PBUF"


# --- encodings -----------------------------------------------------------------------


def _varint(value: int) -> bytes:
    """Protobuf's unsigned varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _pb_int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _pb_bytes(field: int, value: bytes) -> bytes:
    return _varint((field << 3) | 2) + _varint(len(value)) + value


def _pb_fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message of varint and length-delimited fields."""
    fields: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        tag, at = _read_varint(data, at)
        if tag & 7 == 0:
            value, at = _read_varint(data, at)
            fields.append((tag >> 3, value))
        elif tag & 7 == 2:
            size, at = _read_varint(data, at)
            fields.append((tag >> 3, data[at:at + size]))
            at += size
        else:
            raise InvalidArgumentError(f"protobuf wire type {tag & 7} is not one an HFile uses")
    return fields


def _hadoop_vint(value: int) -> bytes:
    """Hadoop's ``WritableUtils.writeVInt`` of a non-negative int (index entry key lengths)."""
    if value <= 127:
        return bytes([value])
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return bytes([(-112 - len(body)) & 0xFF]) + body


def _read_hadoop_vint(data: bytes, at: int) -> tuple[int, int]:
    first = struct.unpack_from(">b", data, at)[0]
    if first >= -112:
        return first, at + 1
    size = -112 - first
    return int.from_bytes(data[at + 1:at + 1 + size], "big"), at + 1 + size


def cell_key(row: bytes) -> bytes:
    """The KeyValue key of ``row``: row length, row, family length 0, latest timestamp, Put."""
    return struct.pack(">H", len(row)) + row + b"\x00" + struct.pack(">qB", LATEST_TIMESTAMP, PUT)


# --- writing -------------------------------------------------------------------------


def _block(magic: bytes, body: bytes, previous: int) -> bytes:
    """One uncompressed block with its header and CRC32 checksums."""
    chunks = (len(body) + HEADER_SIZE + BYTES_PER_CHECKSUM - 1) // BYTES_PER_CHECKSUM
    header = magic + struct.pack(">iiqBii", len(body) + 4 * chunks, len(body), previous, CHECKSUM_CRC32,
                                 BYTES_PER_CHECKSUM, HEADER_SIZE + len(body))
    data = header + body
    sums = b"".join(struct.pack(">I", zlib.crc32(data[i:i + BYTES_PER_CHECKSUM]))
                    for i in range(0, len(data), BYTES_PER_CHECKSUM))
    return data + sums


def write_hfile(cells: Iterable[tuple[bytes, bytes]], file_info: Mapping[str, bytes] = {}) -> bytes:
    """An HFile of ``cells`` (row, value), which must be distinct and are written sorted by
    row; ``file_info`` adds entries to the file info (Hudi puts ``schema`` there)."""
    rows = sorted(cells)
    if not rows:
        raise InvalidArgumentError("an HFile needs at least one cell")
    if any(a[0] == b[0] for a, b in pairwise(rows)):
        raise InvalidArgumentError("HFile rows must be distinct")
    out = bytearray()
    index: list[tuple[int, int, bytes]] = []  # (offset, on-disk size, first key)
    body, first_key, last_data = bytearray(), b"", -1
    key_bytes = value_bytes = 0

    def flush() -> None:
        nonlocal body, last_data
        block = _block(DATA, bytes(body), last_data)
        index.append((len(out), len(block), first_key))
        last_data = len(out)
        out.extend(block)
        body = bytearray()

    for row, value in rows:
        key = cell_key(row)
        if body and len(body) + len(key) + len(value) + 9 > BLOCK_TARGET:
            flush()
        if not body:
            first_key = key
        body += struct.pack(">ii", len(key), len(value)) + key + value + b"\x00"
        key_bytes += len(key)
        value_bytes += len(value)
    flush()
    data_size = len(out)
    root = b"".join(struct.pack(">qi", offset, size) + _hadoop_vint(len(key)) + key for offset, size, key in index)
    load_on_open = len(out)
    out += _block(ROOT_INDEX, root, -1)
    out += _block(ROOT_INDEX, b"", load_on_open)  # the meta index: no meta blocks
    info = {
        "KEY_VALUE_VERSION": struct.pack(">i", 1),
        "MAX_MEMSTORE_TS_KEY": struct.pack(">q", 0),
        "hfile.AVG_KEY_LEN": struct.pack(">i", key_bytes // len(rows)),
        "hfile.AVG_VALUE_LEN": struct.pack(">i", value_bytes // len(rows)),
        "hfile.CREATE_TIME_TS": struct.pack(">q", 0),
        "hfile.LASTKEY": cell_key(rows[-1][0]),
        **file_info,
    }
    entries = b"".join(_pb_bytes(1, _pb_bytes(1, name.encode()) + _pb_bytes(2, value))
                       for name, value in sorted(info.items(), key=lambda item: item[0].encode()))
    file_info_offset = len(out)
    out += _block(FILE_INFO, PB_MAGIC + _varint(len(entries)) + entries, -1)
    trailer = b"".join([
        _pb_int(1, file_info_offset), _pb_int(2, load_on_open), _pb_int(3, len(root)),
        _pb_int(4, data_size), _pb_int(5, len(index)), _pb_int(6, 0), _pb_int(7, len(rows)),
        _pb_int(8, 1), _pb_int(9, 0), _pb_int(10, index[-1][0]), _pb_bytes(11, COMPARATOR.encode()),
        _pb_int(12, CODEC_NONE),
    ])
    tail = TRAILER_MAGIC + _varint(len(trailer)) + trailer
    out += tail + b"\x00" * (TRAILER_SIZE - 4 - len(tail)) + struct.pack(">i", TRAILER_VERSION)
    return bytes(out)


# --- reading -------------------------------------------------------------------------


def _read_block(data: bytes, at: int, magic: bytes, codec: int, where: str) -> tuple[bytes, int]:
    """(body, offset after the block) of the block of ``magic`` at ``at``."""
    if data[at:at + 8] != magic:
        raise CorruptFileError(where, at, f"expected an HFile {magic!r} block, found {data[at:at + 8]!r}")
    on_disk, uncompressed, _, _, _, data_with_header = struct.unpack_from(">iiqBii", data, at + 8)
    body = data[at + HEADER_SIZE:at + data_with_header]
    if codec == CODEC_GZ:
        body = gzip.decompress(body)
    elif codec != CODEC_NONE:
        raise CorruptFileError(where, at, f"HFile compression codec {codec} is not read here")
    if len(body) != uncompressed:
        raise CorruptFileError(where, at, f"HFile block holds {len(body)} bytes, its header says {uncompressed}")
    return body, at + HEADER_SIZE + on_disk


def read_hfile(data: bytes, where: str = "HFile") -> tuple[list[tuple[bytes, bytes]], dict[str, bytes]]:
    """The cells (row, value) and file info of an HFile of one index level."""
    if len(data) < TRAILER_SIZE or data[-TRAILER_SIZE:-TRAILER_SIZE + 8] != TRAILER_MAGIC:
        raise CorruptFileError(where, max(len(data) - TRAILER_SIZE, 0), "no HFile version 3 trailer")
    tail = data[-TRAILER_SIZE:]
    size, at = _read_varint(tail, 8)
    trailer = dict(_pb_fields(tail[at:at + size]))
    codec, levels = int(trailer.get(12, CODEC_NONE)), int(trailer.get(8, 1))
    if levels != 1:
        raise CorruptFileError(where, 0, f"HFile with {levels} index levels is not read here")
    root, after = _read_block(data, int(trailer[2]), ROOT_INDEX, codec, where)
    offsets, at = [], 0
    for _ in range(int(trailer.get(5, 0))):
        offset, _size = struct.unpack_from(">qi", root, at)
        key_size, at = _read_hadoop_vint(root, at + 12)
        at += key_size
        offsets.append(offset)
    info_body, _ = _read_block(data, int(trailer[1]), FILE_INFO, codec, where)
    size, at = _read_varint(info_body, len(PB_MAGIC))
    info = {}
    for _, pair in _pb_fields(info_body[at:at + size]):
        fields = dict(_pb_fields(pair))  # type: ignore[arg-type]
        info[bytes(fields[1]).decode()] = bytes(fields[2])  # type: ignore[arg-type]
    cells = []
    for offset in offsets:
        body, _ = _read_block(data, offset, DATA, codec, where)
        at = 0
        while at < len(body):
            key_size, value_size = struct.unpack_from(">ii", body, at)
            key = body[at + 8:at + 8 + key_size]
            (row_size,) = struct.unpack_from(">H", key, 0)
            value = body[at + 8 + key_size:at + 8 + key_size + value_size]
            _, at = _read_hadoop_vint(body, at + 8 + key_size + value_size)  # memstore timestamp
            cells.append((bytes(key[2:2 + row_size]), bytes(value)))
    return cells, info
