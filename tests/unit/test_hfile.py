"""HFile version 3 as Hudi's metadata table stores records: what write_hfile writes reads
back, sorted, across several data blocks, with the file info; bad input is refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtier.errors import CorruptFileError, InvalidArgumentError
from memtier.hudi.hfile import TRAILER_SIZE, read_hfile, write_hfile


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.binary(min_size=1, max_size=300), st.binary(max_size=3000), min_size=1, max_size=80))
def test_what_is_written_reads_back_sorted(cells: dict[bytes, bytes]) -> None:
    data = write_hfile(cells.items(), {"schema": b"{}"})
    read, info = read_hfile(data)
    assert read == sorted(cells.items())
    assert info["schema"] == b"{}" and info["hfile.LASTKEY"][2:2 + len(max(cells))] == max(cells)


def test_many_cells_span_several_data_blocks() -> None:
    cells = [(f"key-{i:05d}".encode(), b"v" * 500) for i in range(400)]  # ~200 KiB: 4 blocks
    data = write_hfile(reversed(cells))
    assert data.count(b"DATABLK*") >= 3
    assert read_hfile(data)[0] == cells


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="at least one"):
        write_hfile([])
    with pytest.raises(InvalidArgumentError, match="distinct"):
        write_hfile([(b"a", b"1"), (b"a", b"2")])
    with pytest.raises(CorruptFileError, match="trailer"):
        read_hfile(b"x" * TRAILER_SIZE)
