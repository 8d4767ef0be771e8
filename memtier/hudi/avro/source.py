"""The bytes being decoded, readable as little-endian 64-bit words from any offset."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def _words(u8: np.ndarray) -> np.ndarray:
    """The little-endian uint64 starting at every byte of ``u8`` (a view, no copy)."""
    return np.ndarray((max(0, len(u8) - 7),), "<u8", buffer=u8, strides=(1,))


class _Source:
    """Reads at arbitrary byte offsets of one buffer; reads past its end see zero bytes."""

    def __init__(self, data: pa.Buffer | bytes | memoryview) -> None:
        self.buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
        self.u8 = np.frombuffer(self.buffer, np.uint8)
        self.size = len(self.u8)
        self.tail_start = max(0, self.size - 16)
        tail = np.zeros(self.size - self.tail_start + 16, np.uint8)
        tail[: self.size - self.tail_start] = self.u8[self.tail_start :]
        self._words, self._tail_words = _words(self.u8), _words(tail)

    def word(self, pos: np.ndarray, near_end: bool = True) -> np.ndarray:
        """The little-endian uint64 at each of ``pos``; unless ``near_end``, the caller
        knows every word lies inside the buffer."""
        body = self._words
        if not near_end or len(pos) == 0 or int(pos.max()) < len(body):
            return body[pos]
        out = np.empty(len(pos), np.uint64)
        inside = pos < len(body)
        out[inside] = body[pos[inside]]
        out[~inside] = self._tail_words[pos[~inside] - self.tail_start]
        return out

    def rows(self, pos: np.ndarray, width: int) -> np.ndarray:
        """(n, width) bytes at ``pos``, which the caller checked lie inside the buffer."""
        strided = np.lib.stride_tricks.as_strided(
            self.u8, (max(0, self.size - width + 1), width), (1, 1), writeable=False
        )
        return strided[pos]
