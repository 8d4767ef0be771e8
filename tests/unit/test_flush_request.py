"""What a flush request tells the flush worker about where its rows lie in the WAL: every
frame's segment, CRC seed, offset and length survive the trip through the RPC codec."""

from __future__ import annotations

from memtier.rpc.codec import dumps, loads
from memtier.tableserver.flush import FramePlaces, WalRows
from memtier.tableserver.flusher import _frame_refs, _refs
from memtier.wal import FrameRef


def test_frame_refs_cross_the_wire_as_they_were_in_order_across_segments() -> None:
    refs = tuple(
        FrameRef(f"/wal/t/ts-0/{segment:08d}.wal", seed, offset, length)
        for segment, seed, offset, length in [
            (0, 7, 0, 120), (0, 7, 4_096, 3_500), (1, 2**40 + 3, 64, 1), (0, 7, 2**40, 2**31), (2, 0, 10, 99),
        ]
    )
    request = loads(dumps({"refs": [_refs(WalRows(FramePlaces.of(refs), num_rows=5)),
                                      _refs(WalRows(FramePlaces.of(()), num_rows=0))]}))
    assert _frame_refs(request["refs"][0]) == list(refs)
    assert _frame_refs(request["refs"][1]) == []
    assert request["refs"][0]["segments"] == [["/wal/t/ts-0/00000000.wal", 7], ["/wal/t/ts-0/00000001.wal", 2**40 + 3],
                                              ["/wal/t/ts-0/00000002.wal", 0]]


def test_places_joined_renumber_each_parts_segments_and_keep_the_order() -> None:
    first = (FrameRef("/wal/a", 1, 0, 10), FrameRef("/wal/b", 2, 5, 20))
    second = (FrameRef("/wal/b", 2, 40, 30), FrameRef("/wal/c", 3, 0, 40), FrameRef("/wal/a", 1, 99, 50))
    joined = FramePlaces.joined([FramePlaces.of(first), FramePlaces.of(()), FramePlaces.of(second)])
    assert joined.refs() == [*first, *second]
    assert joined.segments == (("/wal/a", 1), ("/wal/b", 2), ("/wal/c", 3)) and len(joined) == 5
    assert FramePlaces.joined([]).refs() == []
