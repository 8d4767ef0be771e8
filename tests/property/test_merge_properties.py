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
    st.lists(st.tuples(KEYS, ORDERING), max_size=6).map(lambda rows: ("odelete", rows)),
    st.lists(st.tuples(KEYS, ORDERING, st.booleans()), max_size=12).map(lambda rows: ("mixed", rows)),
)


def fold(base: list[tuple[int, int]], entries: list, with_ordering: bool) -> dict[int, tuple[int, str]]:
    """Hudi's merge, one record at a time: fold the log into a buffer, then merge the
    buffer with the base. A delete in commit order (no ordering value, or a zero)
    replaces whatever is buffered and any record replaces it; otherwise records and
    ordered deletes replace the buffered state unless its ordering value is greater."""
    buffer: dict[int, tuple[str, int | None, str]] = {}  # key -> (kind, ordering, tag)

    def event(k: int, kind: str, o: int | None, tag: str) -> None:
        current = buffer.get(k)
        zero = kind == "delete" and (not with_ordering or not o)
        if (zero or current is None or current[1] is None or not with_ordering
                or o >= current[1]):
            buffer[k] = (kind, None if zero else o, tag)

    for e_index, (kind, payload) in enumerate(entries):
        if kind == "delete":
            for k in payload:
                event(k, "delete", None, "")
        elif kind == "odelete":
            for k, o in payload:
                event(k, "delete", o, "")
        elif kind == "mixed":
            for r_index, (k, o, deleted) in enumerate(payload):
                event(k, "delete" if deleted else "data", o, f"e{e_index}-r{r_index}")
        else:
            for r_index, (k, o) in enumerate(payload):
                event(k, "data", o, f"e{e_index}-r{r_index}")
    state = {k: (o, f"base-{k}") for k, o in base}
    for k, (kind, o, tag) in buffer.items():
        if k in state and with_ordering and o is not None and state[k][0] > o:
            continue  # the base version is newer
        if kind == "delete":
            state.pop(k, None)
        else:
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
        elif kind == "odelete":
            log.append(LogEntry(deleted_keys=pa.array([str(k) for k, _ in payload], pa.string()),
                                deleted_ordering=pa.array([o for _, o in payload], pa.int64())))
        elif kind == "mixed":
            rows = [(cast(k), o, f"e{e_index}-r{r}") for r, (k, o, _) in enumerate(payload)]
            mask = pa.array([d for _, _, d in payload], pa.bool_())
            log.append(LogEntry(records=table(rows, key_type), delete_mask=mask))
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
