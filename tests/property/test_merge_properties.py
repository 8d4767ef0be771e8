"""The vectorized file-group merge equals a record-at-a-time fold of Hudi's merge rules."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from memtier.hudi.merge import LogEntry, MergeSpec, merge_file_group

KEYS = st.integers(min_value=0, max_value=30)
ORDERING = st.integers(min_value=-2, max_value=5)


def upsert_rows(unique: bool):
    rows = st.lists(st.tuples(KEYS, ORDERING), max_size=12)
    if unique:
        rows = st.lists(st.tuples(KEYS, ORDERING), max_size=12, unique_by=lambda r: r[0])
    return rows


ENTRY = st.one_of(
    upsert_rows(unique=False).map(lambda rows: ("upsert", rows)),
    st.lists(KEYS, max_size=6).map(lambda keys: ("delete", keys)),
)


def fold(base: list[tuple[int, int]], entries: list, with_ordering: bool) -> dict[int, tuple[int, str]]:
    """Hudi's merge, one record at a time: fold the log into a buffer (a delete replaces
    the buffered record, any record replaces a buffered delete), then merge the buffer
    with the base."""
    buffer: dict[int, tuple[str, int, str]] = {}  # key -> (kind, ordering, tag)
    for e_index, (kind, payload) in enumerate(entries):
        if kind == "delete":
            for k in payload:
                buffer[k] = ("delete", 0, "")
            continue
        for r_index, (k, o) in enumerate(payload):
            current = buffer.get(k)
            if current is None or current[0] == "delete" or not with_ordering or o >= current[1]:
                buffer[k] = ("data", o, f"e{e_index}-r{r_index}")
    state = {k: (o, f"base-{k}") for k, o in base}
    for k, (kind, o, tag) in buffer.items():
        if kind == "delete":
            state.pop(k, None)
        elif k not in state or not with_ordering or o >= state[k][0]:
            state[k] = (o, tag)
    return state


def table(rows: list[tuple[int, int, str]], key_type: pa.DataType) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], key_type),
            "o": pa.array([r[1] for r in rows], pa.int64()),
            "v": pa.array([r[2] for r in rows], pa.string()),
        }
    )


@settings(max_examples=300, deadline=None)
@given(
    base=upsert_rows(unique=True),
    entries=st.lists(ENTRY, max_size=6),
    with_ordering=st.booleans(),
    sorted_base=st.booleans(),
    string_keys=st.booleans(),
)
def test_merge_equals_sequential_fold(base, entries, with_ordering, sorted_base, string_keys) -> None:
    key_type = pa.string() if string_keys else pa.int64()
    cast = str if string_keys else int
    base_rows = sorted(base) if sorted_base else base
    base_table = table([(cast(k), o, f"base-{k}") for k, o in base_rows], key_type) if base else None
    log = []
    for e_index, (kind, payload) in enumerate(entries):
        if kind == "delete":
            log.append(LogEntry(deleted_keys=pa.array([str(k) for k in payload], pa.string())))
        else:
            rows = [(cast(k), o, f"e{e_index}-r{r}") for r, (k, o) in enumerate(payload)]
            log.append(LogEntry(records=table(rows, key_type)))
    spec = MergeSpec("k", "o" if with_ordering else None)
    merged = merge_file_group(base_table, log, spec)
    got = {} if merged is None else {
        cast(k): (o, v) for k, o, v in zip(*(merged.column(c).to_pylist() for c in "kov"), strict=True)
    }
    assert merged is None or merged.num_rows == len(got), "a key appears twice"
    expected = {cast(k): v for k, v in fold(base, entries, with_ordering).items()}
    assert got == expected
