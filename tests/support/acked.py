"""What the fencing and crash tests check every read against: each acknowledged write,
read once."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

#: A table the tests make keyed (record key ``id``, ordering ``ts``) or append-only.
SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])


def batch(ids: list[int], ts: int) -> pa.Table:
    """Rows of ``ids`` at ordering value ``ts``, each value naming its key and ``ts``."""
    return pa.table({"id": ids, "ts": [ts] * len(ids), "v": [f"{i}@{ts}" for i in ids]}, schema=SCHEMA)


class Acked:
    """What every read must show: the latest version of each key (keyed tables), or every
    acknowledged row exactly once (append-only tables)."""

    def __init__(self, keyed: bool) -> None:
        self.keyed = keyed
        self.rows: Counter[tuple[int, int, str]] = Counter()

    def acknowledged(self, batch: pa.Table) -> None:
        self.rows.update(zip(*(batch.column(c).to_pylist() for c in SCHEMA.names), strict=True))

    def expected(self) -> Counter[tuple[int, int, str]]:
        if not self.keyed:
            return self.rows
        latest: dict[int, tuple[int, int, str]] = {}
        for row in self.rows:
            if row[0] not in latest or row[1] > latest[row[0]][1]:
                latest[row[0]] = row
        return Counter(latest.values())

    def check(self, table: pa.Table, who: str) -> None:
        """``table`` (of at least the :data:`SCHEMA` columns) holds exactly what is expected."""
        got = Counter(zip(*(table.column(c).to_pylist() for c in SCHEMA.names), strict=True))
        expected = self.expected()
        missing, extra = expected - got, got - expected
        assert not missing and not extra, (
            f"{who}: {sum(missing.values())} acknowledged rows missing (e.g. {sorted(missing)[:3]}), "
            f"{sum(extra.values())} rows too many (e.g. {sorted(extra)[:3]}), of {sum(expected.values())}"
        )

