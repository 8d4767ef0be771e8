"""Read filters: ``[(column, op, value), ...]`` tuples, AND-ed, as hudi-rs and pyarrow take them.

Filters on partition columns prune whole partitions from the partition path before any
file is opened; every filter is applied again to the merged rows (a filter must never
see a row before its newer version has replaced it). Filters on record-key columns are the
exception that may also run before the merge (:func:`key_filters`): every version of a
record has the same key, so they keep all versions of a key or none; equalities on every
key column also name the only buckets worth reading (:func:`key_buckets`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from memtier.errors import InvalidArgumentError, UnknownColumnError
from memtier.hudi.keys import KeyColumns

__all__ = [
    "DEFAULT_PARTITION",
    "Filter",
    "filtered",
    "key_buckets",
    "key_filters",
    "pinned_values",
    "parse_partition_path",
    "partition_predicate",
    "to_expression",
    "validate",
]

Filter = tuple[str, str, Any]
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

_COMPARISONS: dict[str, Callable[[pc.Expression, Any], pc.Expression]] = {
    "=": lambda f, v: f == v,
    "==": lambda f, v: f == v,
    "!=": lambda f, v: f != v,
    "<": lambda f, v: f < v,
    "<=": lambda f, v: f <= v,
    ">": lambda f, v: f > v,
    ">=": lambda f, v: f >= v,
    "in": lambda f, v: f.isin(list(v)),
    "not in": lambda f, v: ~f.isin(list(v)),
}


def validate(filters: Sequence[Filter] | None, columns: Sequence[str]) -> list[Filter]:
    """The filters as a list, or a clear error for an unknown column or operator."""
    if filters is None:
        return []
    if isinstance(filters, tuple) and len(filters) == 3 and isinstance(filters[0], str):
        filters = [filters]  # a single (column, op, value) tuple
    checked = []
    for item in filters:
        if not (isinstance(item, (tuple, list)) and len(item) == 3):
            raise InvalidArgumentError(f"a filter is (column, op, value), got {item!r}")
        column, op, value = item
        if column not in columns:
            raise UnknownColumnError(f"filter column {column!r} is not in the table {list(columns)}")
        op = op.lower() if isinstance(op, str) else op
        if op not in _COMPARISONS:
            raise InvalidArgumentError(
                f"filter operator {op!r} on {column!r} is not one of {sorted(_COMPARISONS)}"
            )
        if op in ("in", "not in") and isinstance(value, (str, bytes)):
            raise InvalidArgumentError(f"filter {op!r} on {column!r} needs a list of values")
        checked.append((column, op, value))
    return checked


def to_expression(filters: Sequence[Filter]) -> pc.Expression | None:
    """One AND-ed pyarrow expression, or None for no filters."""
    expression = None
    for column, op, value in filters:
        term = _COMPARISONS[op](pc.field(column), value)
        expression = term if expression is None else expression & term
    return expression


_KERNELS: dict[str, Callable[[Any, Any], Any]] = {
    "=": pc.equal, "==": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
    ">": pc.greater, ">=": pc.greater_equal,
}


def filtered(table: pa.Table, filters: Sequence[Filter]) -> pa.Table:
    """``table``'s rows passing every filter, as :func:`to_expression` would keep them,
    through compute kernels (a query plan costs ~0.2 ms even for one row); through the
    expression when a value does not fit its column as the kernels take it."""
    if not filters:
        return table
    try:
        mask = None
        for column, op, value in filters:
            data = table.column(column)
            if op in ("in", "not in"):
                values = list(value)  # typed as given, as the expression types them
                test = pc.is_in(data, value_set=pa.array(values) if values else pa.array([], data.type))
                test = pc.invert(test) if op == "not in" else test
            else:
                test = _KERNELS[op](data, value)
            mask = test if mask is None else pc.and_kleene(mask, test)
        return table.filter(mask)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return table.filter(to_expression(filters))


def parse_partition_path(path: str, fields: Sequence[str], hive_style: bool) -> dict[str, str | None]:
    """Partition column values from a path like ``a=1/b=x`` (or ``1/x``); None if unparseable."""
    parts = path.split("/") if path else []
    if len(parts) != len(fields):
        return {}
    values: dict[str, str | None] = {}
    for field, part in zip(fields, parts, strict=True):
        if hive_style:
            name, sep, value = part.partition("=")
            if not sep or name != field:
                return {}
        else:
            value = part
        values[field] = None if value == DEFAULT_PARTITION else value
    return values


def partition_predicate(
    filters: Sequence[Filter], fields: Sequence[str], hive_style: bool, schema: pa.Schema
) -> Callable[[str], bool] | None:
    """A test on partition paths from the filters on partition columns, or None; each
    path is tested once."""
    relevant = [f for f in filters if f[0] in fields]
    if not relevant:
        return None
    types = {name: schema.field(name).type for name in fields}

    decided: dict[str, bool] = {}  # a table has few partitions and many file groups in each

    def test(partition_path: str) -> bool:
        values = parse_partition_path(partition_path, fields, hive_style)
        if not values:
            return True  # not a layout we can parse: never prune what we cannot read
        try:
            row = pa.table({f: pa.array([values[f]], pa.string()).cast(types[f]) for f in fields})
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return True
        return bool(filtered(row, relevant).num_rows)

    def keep(partition_path: str) -> bool:
        known = decided.get(partition_path)
        if known is None:
            known = decided[partition_path] = test(partition_path)
        return known

    return keep


#: Key combinations beyond which :func:`key_buckets` gives up (reads every bucket).
MAX_KEY_COMBINATIONS = 10_000


def key_filters(filters: Sequence[Filter], key_fields: Sequence[str]) -> list[Filter]:
    """The filters on record-key columns: safe to apply before the merge."""
    return [f for f in filters if f[0] in key_fields]


def key_buckets(
    filters: Sequence[Filter], key_fields: Sequence[str], schema: pa.Schema, num_buckets: int
) -> set[int] | None:
    """The buckets that can hold rows passing ``filters``, when they pin every record-key
    column with ``=`` or ``in``; None when they do not (or values do not fit the columns)."""
    choices = pinned_values([f for f in filters if f[0] in key_fields])
    if any(f not in choices for f in key_fields):
        return None
    combinations = 1
    for field in key_fields:
        combinations *= len(choices[field])
    if combinations == 0:
        return set()
    if combinations > MAX_KEY_COMBINATIONS:
        return None
    rows = _cross_product([choices[f] for f in key_fields])
    try:
        keys = pa.table(
            {f: pa.array(col, schema.field(f).type) for f, col in zip(key_fields, rows, strict=True)}
        )
        return set(KeyColumns.of(keys, key_fields).bucket_ids(num_buckets).tolist())
    except (pa.ArrowException, TypeError, ValueError, InvalidArgumentError):
        return None


def pinned_values(filters: Sequence[Filter]) -> dict[str, list[Any]]:
    """The values ``=`` and ``in`` filters allow, by column (several on one column allow
    what they all allow; null matches nothing)."""
    pinned: dict[str, list[Any]] = {}
    for column, op, value in filters:
        if op in ("=", "==", "in"):
            values = [v for v in (value if op == "in" else [value]) if v is not None]
            known = pinned.get(column)
            pinned[column] = values if known is None else [v for v in known if v in values]
    return pinned


def _cross_product(columns: Sequence[list[Any]]) -> list[list[Any]]:
    """Every combination of one value per column, as columns."""
    out: list[list[Any]] = [[] for _ in columns]
    for combination in itertools.product(*columns):
        for column, value in zip(out, combination, strict=True):
            column.append(value)
    return out
