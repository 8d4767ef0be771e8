"""Avro varints (zigzag, little-endian base 128), encoded and decoded vectorized."""

from __future__ import annotations

import numpy as np

_ZERO = np.uint64(0)


_LOW7 = 0x7F7F7F7F7F7F7F7F


_HIGH1 = 0x8080808080808080


# _CONT[s]: continuation bits of the first min(s, 8) bytes of an s-byte varint.
_CONT = np.array([sum(0x80 << (8 * k) for k in range(min(s - 1, 8))) for s in range(11)], np.uint64)


def _zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _unzigzag(z: np.ndarray) -> np.ndarray:
    return ((z >> 1) ^ (np.uint64(0) - (z & 1))).view(np.int64)


def _varint_size(z: int) -> int:
    return max(1, (int(z).bit_length() + 6) // 7)


def _varint_words(
    z: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray | np.uint64, np.ndarray | int]:
    """Varints of ``z``, each ``lo``..``hi`` bytes: as little-endian byte strings in two
    uint64 lanes (bytes 0-7, bytes 8-9), zero past each varint, and their sizes (an int
    when all are equal)."""
    if lo == hi:
        sizes: np.ndarray | int = lo
        cont = _CONT[lo]
    else:
        sizes = np.full(len(z), lo, np.uint8)
        for k in range(lo, hi):
            sizes += z >= np.uint64(1 << (7 * k))
        cont = _CONT[sizes]
    if hi == 1:  # a single byte: the value itself
        return z, _ZERO, sizes
    if hi <= 4:  # up to 28 bits: spread the 7-bit groups over the bytes of a uint32
        x = z.astype(np.uint32)
        x = (x & 0x3FFF) | ((x & 0x0FFFC000) << 2)
        x = (x & 0x007F007F) | ((x & 0x3F803F80) << 1)
        return (x | cont.astype(np.uint32)).astype(np.uint64), _ZERO, sizes
    x = z & 0x00FFFFFFFFFFFFFF
    x = (x & 0x0FFFFFFF) | ((x & 0x00FFFFFFF0000000) << 4)
    x = (x & 0x00003FFF00003FFF) | ((x & 0x0FFFC0000FFFC000) << 2)
    x = (x & 0x007F007F007F007F) | ((x & 0x3F803F803F803F80) << 1)
    if hi <= 8:
        return x | cont, _ZERO, sizes
    high = ((z >> 56) & 0x7F) | ((z >> 63) << 8) | (np.asarray(sizes) > 9) * np.uint64(0x80)
    return x | cont, high, sizes


def _read_varints(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, sizes) of the varints starting at byte 0 of each little-endian uint64
    (varints longer than 8 bytes come back with size 0: the caller re-reads them)."""
    stop = ~words & _HIGH1
    low = stop & (~stop + 1)
    mask = (low << 1) - 1  # every bit up to the terminating byte (all bits when byte 7)
    x = words & mask & _LOW7
    x = (x & 0x007F007F007F007F) | ((x & 0x7F007F007F007F00) >> 1)
    x = (x & 0x00003FFF00003FFF) | ((x & 0x3FFF00003FFF0000) >> 2)
    x = (x & 0x000000000FFFFFFF) | ((x & 0x0FFFFFFF00000000) >> 4)
    sizes = np.bitwise_count(mask) >> 3
    sizes[stop == 0] = 0
    return _unzigzag(x), sizes.astype(np.int64)
