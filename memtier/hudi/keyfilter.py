"""Bloom filters of a base file's record-key columns, kept in its Parquet footer.

A read of a few keys asks a base file's filters before it reads a row group: where a
lookup gives the key alone, the key's bucket has a slice in every partition and the row
group statistics of each may span the key, so without them every partition's row group
was read (on first touch, from disk); with them only the key's partition's is, plus ~1%
false positives. Only partitioned tables' base files carry them
(:attr:`~memtier.hudi.tablemeta.TableMeta.filtered_key_fields`): elsewhere a key's bucket
names its one file group. Other readers ignore the footer entries.

One entry per integer or string key column, ``memtier.key_filter.<column>``: base64 of
a version byte (1), the number of hash functions (u8), the filter's bits (u64, a multiple
of 8) and the bits, little-endian, bit ``i`` in byte ``i // 8`` at ``1 << (i % 8)``. A
value's positions are ``((h1 + i * h2) mod 2**32) * bits >> 32`` for ``i < hashes``, with
``h1`` the low and ``h2`` the high 32 bits (made odd) of SplitMix64's finalizer of its
64-bit hash: an integer's two's-complement bits, a string's Java ``String.hashCode`` in
the low and its UTF-8 length in the high half.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.types as pat

from memtier.hudi.keys import java_string_hashes

__all__ = ["FOOTER_PREFIX", "KeyBloom", "footer_filters", "hashes_of", "key_filter_metadata"]

FOOTER_PREFIX = "memtier.key_filter."
_VERSION = 1
_HEADER = struct.Struct("<BBQ")
_HEADER_CHARS = 16  # base64 of the header's first 12 bytes (10 of header, 2 of bits)
_BITS_PER_KEY = 10
_HASHES = 7  # ~0.8% false positives at 10 bits a key
#: Probes of at most this many values test them one by one, without array steps.
_FEW = 8
_LOW32 = 0xFFFFFFFF
#: No filter for a column of more rows than this (its bits would outgrow a footer).
MAX_ROWS = 8_000_000


@dataclass(frozen=True)
class KeyBloom:
    """A Bloom filter of one column's values, as its footer entry holds it (base64): no
    false negatives, ~1% false positives. A probe of a few values decodes only the bytes
    their bits are in (a 500,000-row file's entry is ~800 KB)."""

    encoded: bytes
    size: int  # number of bits
    hashes: int

    @classmethod
    def of(cls, column: pa.Array | pa.ChunkedArray) -> KeyBloom | None:
        """The filter of ``column``'s values; None for a column of another type, or too long."""
        hashed = hashes_of(column)
        if hashed is None or len(hashed) > MAX_ROWS:
            return None
        size = max(64, -(-len(hashed) * _BITS_PER_KEY // 64) * 64)
        marked = np.zeros(size, dtype=bool)
        marked[_positions(hashed, size, _HASHES).ravel()] = True
        bits = np.packbits(marked, bitorder="little").tobytes()
        return cls(base64.b64encode(_HEADER.pack(_VERSION, _HASHES, size) + bits), size, _HASHES)

    @classmethod
    def decode(cls, text: bytes | str) -> KeyBloom | None:
        """The filter an entry holds; None when it is of another version or malformed
        (then nothing is skipped)."""
        encoded = text.encode() if isinstance(text, str) else bytes(text)
        try:
            version, hashes, size = _HEADER.unpack_from(base64.b64decode(encoded[:_HEADER_CHARS], validate=True))
        except (ValueError, struct.error):
            return None
        if version != _VERSION or size == 0 or size % 8 or not hashes or len(encoded) != _encoded_length(size):
            return None
        return cls(encoded, size, hashes)

    def entry(self) -> str:
        """The footer entry."""
        return self.encoded.decode()

    def may_hold(self, values: pa.Array) -> bool:
        """False only when no value of ``values`` (of the filtered column's type) is in it."""
        return self.may_hold_hashed(hashes_of(values))

    def may_hold_hashed(self, hashed: np.ndarray | None) -> bool:
        """:meth:`may_hold` of values hashed already (:func:`hashes_of`: a read probes
        many filters with the same few values)."""
        if hashed is None:
            return True
        if len(hashed) <= _FEW:  # a lookup's key or two: array steps would cost ~10x
            return any(self._holds(h) for h in hashed.tolist())
        at = _positions(hashed, self.size, self.hashes)
        raw = at // 8 + _HEADER.size  # the bytes holding the bits, in the decoded entry
        quanta = {int(q): base64.b64decode(self.encoded[4 * q : 4 * q + 4]) for q in np.unique(raw // 3)}
        held = np.array([quanta[int(r) // 3][int(r) % 3] for r in raw.ravel()], dtype=np.uint8).reshape(raw.shape)
        present = (held >> (at % 8).astype(np.uint8)) & 1
        return bool(np.any(np.all(present, axis=1)))

    def _holds(self, hashed: int) -> bool:
        """Whether every bit of one hashed value is set (:func:`_positions` for one value)."""
        low, high = hashed & _LOW32, (hashed >> 32) | 1
        for i in range(self.hashes):
            bit = (((low + i * high) & _LOW32) * self.size) >> 32
            raw = bit // 8 + _HEADER.size  # its byte in the decoded entry
            quantum = base64.b64decode(self.encoded[4 * (raw // 3) : 4 * (raw // 3) + 4])
            if not (quantum[raw % 3] >> (bit % 8)) & 1:
                return False
        return True


def key_filter_metadata(table: pa.Table, key_fields: Sequence[str]) -> dict[str, str]:
    """The footer entries of a base file holding ``table``: a filter per key column."""
    entries = {}
    for name in key_fields:
        if name in table.column_names:
            bloom = KeyBloom.of(table.column(name))
            if bloom is not None:
                entries[FOOTER_PREFIX + name] = bloom.entry()
    return entries


def footer_filters(metadata: Mapping[bytes, bytes] | None) -> dict[str, KeyBloom]:
    """The key filters in a Parquet footer's key-value metadata, by column."""
    prefix = FOOTER_PREFIX.encode()
    found = {}
    for key, value in (metadata or {}).items():
        if key.startswith(prefix):
            bloom = KeyBloom.decode(value)
            if bloom is not None:
                found[key[len(prefix):].decode()] = bloom
    return found


def _encoded_length(size: int) -> int:
    return 4 * -(-(_HEADER.size + size // 8) // 3)


def hashes_of(column: Any) -> np.ndarray | None:
    """A 64-bit hash (uint64) of each value but nulls (they match nothing); None for
    types not filtered."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        column = column.drop_null()
    kind = column.type
    if pat.is_integer(kind):
        raw = column.cast(pa.int64()).to_numpy(zero_copy_only=False).view(np.uint64)
    elif pat.is_string(kind) or pat.is_large_string(kind):
        if pat.is_large_string(kind):
            column = column.cast(pa.string())
        offsets = np.frombuffer(column.buffers()[1], np.int32)[column.offset : column.offset + len(column) + 1]
        lengths = np.diff(offsets).astype(np.uint64)
        raw = java_string_hashes(column).astype(np.uint64) | (lengths << np.uint64(32))
    else:
        return None
    return _mix(raw)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (uint64, wrapping)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _positions(hashed: np.ndarray, size: int, hashes: int) -> np.ndarray:
    """The bit positions (int64, one row of ``hashes`` per value) of each hashed value:
    ``g_i = (h1 + i * h2) mod 2**32`` mapped onto the bits as ``g_i * size >> 32``."""
    low = hashed & np.uint64(0xFFFFFFFF)
    high = (hashed >> np.uint64(32)) | np.uint64(1)
    at = np.empty((len(hashed), hashes), dtype=np.int64)
    for i in range(hashes):
        probe = (low + np.uint64(i) * high) & np.uint64(0xFFFFFFFF)
        at[:, i] = (probe * np.uint64(size)) >> np.uint64(32)
    return at
