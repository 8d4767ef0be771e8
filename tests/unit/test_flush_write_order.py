"""A flush takes the blocks of each bucket's file groups in the order they were written
(``in_write_order``): when a bucket's file groups (one replaced by a clustering while its
blocks were held) hold blocks opened in turns, the pieces interleave by when each block
was opened, each file group's blocks keep their own order, and other buckets and
partitions are left as they come."""

from __future__ import annotations

from dataclasses import dataclass

from memtier.tableserver.filegroup import FileGroupKey, in_write_order


@dataclass(frozen=True)
class _Header:
    created_ms: int


@dataclass(frozen=True)
class _Block:
    name: str
    header: _Header


@dataclass(frozen=True)
class _Group:
    key: FileGroupKey


def _blocks(*opened: tuple[str, int]) -> list[_Block]:
    return [_Block(name, _Header(ms)) for name, ms in opened]


def _names(work: list) -> list[tuple[str, list[str]]]:
    return [(group.key.file_id, [b.name for b in blocks]) for group, blocks in work]


def test_file_groups_of_one_bucket_interleave_by_when_their_blocks_were_opened() -> None:
    older = _Group(FileGroupKey("city=ams", "00000003-aaaa-0"))  # replaced by a clustering
    newer = _Group(FileGroupKey("city=ams", "00000003-bbbb-0"))
    work = [(newer, _blocks(("n1", 20), ("n2", 40))), (older, _blocks(("o1", 10), ("o2", 30), ("o3", 50)))]
    assert _names(in_write_order(work)) == [
        ("00000003-aaaa-0", ["o1"]), ("00000003-bbbb-0", ["n1"]), ("00000003-aaaa-0", ["o2"]),
        ("00000003-bbbb-0", ["n2"]), ("00000003-aaaa-0", ["o3"]),
    ]


def test_runs_of_one_file_group_stay_one_piece_and_other_buckets_are_left_alone() -> None:
    a = _Group(FileGroupKey("city=ams", "00000001-aaaa-0"))
    b = _Group(FileGroupKey("city=ams", "00000001-bbbb-0"))
    other_bucket = _Group(FileGroupKey("city=ams", "00000002-cccc-0"))
    other_partition = _Group(FileGroupKey("city=ber", "00000001-dddd-0"))
    work = [
        (other_bucket, _blocks(("c1", 1))),
        (b, _blocks(("b1", 30), ("b2", 31))),
        (other_partition, _blocks(("d1", 2))),
        (a, _blocks(("a1", 10), ("a2", 11))),
    ]
    assert _names(in_write_order(work)) == [
        ("00000002-cccc-0", ["c1"]),
        ("00000001-aaaa-0", ["a1", "a2"]), ("00000001-bbbb-0", ["b1", "b2"]),
        ("00000001-dddd-0", ["d1"]),
    ]


def test_a_file_group_blocks_keep_their_order_even_when_their_clock_went_back() -> None:
    group = _Group(FileGroupKey("", "00000000-aaaa-0"))
    other = _Group(FileGroupKey("", "00000000-bbbb-0"))
    work = [(group, _blocks(("g1", 50), ("g2", 40))), (other, _blocks(("o1", 45)))]
    names = _names(in_write_order(work))
    flat = [n for _, blocks in names for n in blocks]
    assert flat.index("g1") < flat.index("g2")
