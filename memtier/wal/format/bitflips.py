"""Repairing a record header with one flipped bit from its CRC32C, which tells any
single-bit error in a few hundred bytes apart. No I/O."""

from __future__ import annotations

import functools

import crc32c

from memtier.wal.format.layout import _LENGTH, RECORD_MAGIC


@functools.cache
def _bit_syndromes(length: int) -> dict[int, int]:
    """For a message of ``length`` bytes: the CRC32C change each single flipped bit makes
    -> that bit's index. CRC32C is linear, so the change does not depend on the message
    or the seed, and no two bits (nor a bit and a CRC bit) of a message this short give
    the same change."""
    zero = crc32c.crc32c(bytes(length))
    syndromes = {}
    message = bytearray(length)
    for bit in range(8 * length):
        message[bit >> 3] = 1 << (bit & 7)
        syndromes[crc32c.crc32c(message) ^ zero] = bit
        message[bit >> 3] = 0
    return syndromes


def _repair_bit(message: bytearray, crc: int, seed: int) -> bool:
    """Flip the one bit of ``message`` that makes its CRC32C (seeded) equal ``crc``, if
    one does; whether the message now matches ``crc`` (True also when the bit that flipped
    was in ``crc`` itself)."""
    syndrome = crc32c.crc32c(message, seed) ^ crc
    if syndrome == 0 or syndrome.bit_count() == 1:
        return True
    bit = _bit_syndromes(len(message)).get(syndrome)
    if bit is None:
        return False
    message[bit >> 3] ^= 1 << (bit & 7)
    return True


def _repaired_header(header: memoryview, seed: int) -> bytes | None:
    """A record header with at most one flipped bit (magic, CRC or checked bytes),
    repaired; None if it has more damage (or is no record header)."""
    magic_flips = int.from_bytes(header[:4], "little") ^ int.from_bytes(RECORD_MAGIC, "little")
    if magic_flips.bit_count() > 1:
        return None
    fixed = bytearray(header)
    fixed[:4] = RECORD_MAGIC
    checked = fixed[8:]
    (crc,) = _LENGTH.unpack_from(fixed, 4)
    if magic_flips:  # the one flipped bit was in the magic: the rest must be intact
        return bytes(fixed) if crc32c.crc32c(checked, seed) == crc else None
    if not _repair_bit(checked, crc, seed):
        return None
    fixed[8:] = checked
    return bytes(fixed)
