"""Schema evolution: the changes a table's schema may take, and rows read up to a newer schema.

A table's schema only grows, as Hudi's schema evolution on write lets it (what every Hudi
reader follows without a schema history): nullable columns added at the end of the table
or of a struct, and types widened as Avro's schema resolution promotes them, plus the
promotions Hudi adds. Anything else (a column dropped, renamed or moved, a type narrowed or
changed, a non-null column added) is refused, naming the column and why. Rows written under
an older schema are read up to a newer one by :func:`project`: added columns null, widened
values cast.

Widenings (of the logical Arrow types; nested inside structs, list elements and map
values too):

* an integer to a wider integer (int8 < int16 < int32 < int64), to float or double, or to
  string;
* float to double;
* string to binary;
* decimal(p, s) to decimal(p', s) with p' > p, while Avro stores both in a ``fixed`` of the
  same size (Hudi's log blocks do: Apache Hudi on Spark cannot resolve a fixed of another
  size, so decimal(10, 2) may become decimal(11, 2) but not decimal(12, 2));
* a non-null column to a nullable one.

Record-key and partition columns keep their types (they name the rows and their file
groups); the ordering column may be widened among numbers only.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.types as pat

from memtier.errors import SchemaEvolutionError, SchemaMismatchError, UnknownColumnError
from memtier.hudi.avro import META_FIELDS, arrow_to_avro_schema, decimal_size

__all__ = ["Change", "Roles", "changes", "evolve", "merge", "project", "project_array", "widening_problem"]

_INTEGERS = {pa.int8(): 0, pa.int16(): 1, pa.int32(): 2, pa.int64(): 3}
#: Columns no evolution may add: Hudi's meta columns and its delete flag.
_RESERVED = (*META_FIELDS, "_hoodie_is_deleted")


@dataclass(frozen=True)
class Roles:
    """The columns that play a part beyond holding values: their types stay (key,
    partition) or widen among numbers only (ordering)."""

    record_key: tuple[str, ...] = ()
    partition: tuple[str, ...] = ()
    ordering: str | None = None


@dataclass(frozen=True)
class Change:
    """One change of a schema: a column (a dotted path into structs) added or widened."""

    path: str
    new: pa.DataType
    old: pa.DataType | None = None  # None: added

    def __str__(self) -> str:
        if self.old is None:
            return f"added {self.path} {self.new}"
        return f"widened {self.path} {self.old} -> {self.new}"


def _is_number(t: pa.DataType) -> bool:
    return t in _INTEGERS or pat.is_floating(t) or pat.is_decimal(t)


def widening_problem(old: pa.DataType, new: pa.DataType) -> str | None:
    """None when values of type ``old`` may be read as ``new`` (a widening every Hudi
    reader follows), else why not. Nested types are compared field by field; a struct
    may gain fields at its end (their own problems are :func:`changes`')."""
    problem = _problem(old, new)
    if problem is _NOT_WIDER and _problem(new, old) is None:
        return f"{old} to {new} narrows it (values written before may not fit)"
    if problem is _NOT_WIDER:
        return f"{old} to {new} is not a widening Hudi's readers follow"
    return problem


#: What :func:`_problem` says of a type that is no widening of another, when no more can be said.
_NOT_WIDER = "not wider"


def _problem(old: pa.DataType, new: pa.DataType) -> str | None:
    if old == new:
        return None
    if pat.is_struct(old) and pat.is_struct(new):
        old_names = [f.name for f in old]
        if [f.name for f in new][: len(old_names)] != old_names:
            return f"its fields {old_names} are not kept, in order, at the start of {[f.name for f in new]}"
        for field in old:
            problem = widening_problem(field.type, new.field(field.name).type)
            if problem is not None:
                return f"field {field.name!r}: {problem}"
        return None
    if (pat.is_list(old) and pat.is_list(new)) or (pat.is_large_list(old) and pat.is_large_list(new)):
        problem = widening_problem(old.value_type, new.value_type)
        return None if problem is None else f"its elements: {problem}"
    if pat.is_map(old) and pat.is_map(new):
        if old.key_type != new.key_type:
            return f"its keys are {old.key_type}, not {new.key_type}"
        problem = widening_problem(old.item_type, new.item_type)
        return None if problem is None else f"its values: {problem}"
    if old in _INTEGERS and (new in _INTEGERS and _INTEGERS[new] > _INTEGERS[old]
                             or pat.is_floating(new) and new != pa.float16() or pat.is_string(new)):
        return None
    if old == pa.float32() and new == pa.float64():
        return None
    if pat.is_string(old) and pat.is_binary(new):
        return None
    if pat.is_decimal128(old) and pat.is_decimal128(new) and new.scale == old.scale and new.precision > old.precision:
        if decimal_size(new.precision) == decimal_size(old.precision):
            return None
        return (f"Hudi's Avro log blocks keep decimal({old.precision}, {old.scale}) in {decimal_size(old.precision)} "
                f"bytes and decimal({new.precision}, {new.scale}) in {decimal_size(new.precision)}: Apache Hudi "
                "cannot read the older blocks as the newer type (widen the precision within the same size)")
    return _NOT_WIDER


def _field_changes(old: Sequence[pa.Field], new: Sequence[pa.Field], prefix: str) -> Iterable[Change]:
    """The changes taking the fields ``old`` to ``new`` (one level of a schema or struct),
    or :class:`SchemaEvolutionError` naming the first that may not be taken."""
    new_by_name = {f.name: f for f in new}
    for field in old:
        path = f"{prefix}{field.name}"
        if field.name not in new_by_name:
            raise SchemaEvolutionError(
                f"column {path!r} is gone: dropping or renaming a column is not supported (Hudi's readers "
                "match columns by name, so rows written before would lose it)"
            )
    old_names = [f.name for f in old]
    if [f.name for f in new][: len(old_names)] != old_names:
        raise SchemaEvolutionError(
            f"columns {[f.name for f in new]} {'of ' + prefix[:-1] + ' ' if prefix else ''}do not keep "
            f"{old_names} in order at their start: new columns go at the end (Hudi reads files written "
            "before by position as well as by name)"
        )
    for field in old:
        target = new_by_name[field.name]
        path = f"{prefix}{field.name}"
        if field.nullable and not target.nullable:
            raise SchemaEvolutionError(f"column {path!r} would become non-null; rows written before may hold nulls")
        problem = widening_problem(field.type, target.type)
        if problem is not None:
            raise SchemaEvolutionError(f"column {path!r}: {problem}")
        if field.type != target.type:
            if pat.is_struct(field.type):
                yield from _field_changes(list(field.type), list(target.type), f"{path}.")
            else:
                yield Change(path, target.type, field.type)
    for field in new[len(old_names):]:
        path = f"{prefix}{field.name}"
        if not field.nullable:
            raise SchemaEvolutionError(
                f"column {path!r} is added non-null: rows written before have no value for it (Hudi's "
                "readers fill added columns with null), so it must be nullable"
            )
        if not prefix and field.name in _RESERVED:
            raise SchemaEvolutionError(f"column {path!r} is reserved for Hudi")
        yield Change(path, field.type)


def changes(old: pa.Schema, new: pa.Schema, roles: Roles = Roles()) -> list[Change]:
    """The changes taking ``old`` to ``new``; :class:`SchemaEvolutionError` naming the
    first one a table may not take (see the module)."""
    found = list(_field_changes(list(old), list(new), ""))
    fixed = {*roles.record_key, *roles.partition}
    for change in found:
        if change.old is None:
            continue
        column = change.path.split(".")[0]
        if column in fixed:
            role = "record-key" if column in roles.record_key else "partition"
            raise SchemaEvolutionError(
                f"column {column!r} is a {role} column: its type stays {change.old} (its values name the "
                "rows' keys and file groups)"
            )
        if column == roles.ordering and not (_is_number(change.old) and _is_number(change.new)):
            raise SchemaEvolutionError(
                f"column {column!r} orders the rows: it may widen among numbers only, not to {change.new}"
            )
    try:
        arrow_to_avro_schema(new, "check")
    except SchemaMismatchError as e:  # a type Hudi's Avro cannot carry
        raise SchemaEvolutionError(str(e)) from e
    return found


def _field_type(schema: pa.Schema, path: str) -> tuple[pa.Field, list[str]]:
    """The field at dotted ``path`` and the path's parts."""
    parts = path.split(".")
    fields: Sequence[pa.Field] = list(schema)
    field = None
    for depth, part in enumerate(parts):
        found = [f for f in fields if f.name == part]
        if not found:
            raise UnknownColumnError(f"no column {'.'.join(parts[: depth + 1])!r} in the table schema")
        field = found[0]
        fields = list(field.type) if pat.is_struct(field.type) else []
    assert field is not None
    return field, parts


def _replaced(
    fields: Sequence[pa.Field], parts: list[str], make: Callable[[pa.Field | None], pa.Field]
) -> list[pa.Field]:
    """``fields`` with the field at ``parts`` (into structs) replaced by ``make(field)``,
    or, when there is none, ``make(None)`` added at the end of its struct."""
    head, rest = parts[0], parts[1:]
    names = [f.name for f in fields]
    if not rest:
        made = make(fields[names.index(head)] if head in names else None)
        if head in names:
            return [made if f.name == head else f for f in fields]
        return [*fields, made]
    if head not in names:
        raise UnknownColumnError(f"no struct column {head!r} to add {'.'.join(rest)!r} to")
    parent = fields[names.index(head)]
    if not pat.is_struct(parent.type):
        raise SchemaEvolutionError(f"column {head!r} is {parent.type}, not a struct: nothing can be added inside it")
    inner = pa.struct(_replaced(list(parent.type), rest, make))
    return [parent.with_type(inner) if f.name == head else f for f in fields]


def evolve(
    schema: pa.Schema,
    add_columns: Iterable[pa.Field] = (),
    widen: Mapping[str, pa.DataType] | None = None,
    roles: Roles = Roles(),
) -> tuple[pa.Schema, list[Change]]:
    """``schema`` with ``add_columns`` (fields; a dotted name adds inside a struct, at its
    end) and the types of ``widen`` (dotted column name -> wider type); the new schema and
    its changes, or :class:`SchemaEvolutionError` / :class:`UnknownColumnError` naming what
    may not change and why. Nothing is added or widened unless all of it may be."""
    fields = list(schema)
    for added in add_columns:
        parts = added.name.split(".")

        def add(existing: pa.Field | None, added: pa.Field = added, name: str = parts[-1]) -> pa.Field:
            if existing is not None:
                raise SchemaEvolutionError(f"column {added.name!r} already exists ({existing.type})")
            return pa.field(name, added.type, added.nullable, added.metadata)

        fields = _replaced(fields, parts, add)
    for path, new_type in (widen or {}).items():
        _field_type(pa.schema(fields), path)  # names the missing column
        fields = _replaced(fields, path.split("."), lambda f, t=new_type: f.with_type(t))
    evolved = pa.schema(fields, metadata=schema.metadata)
    return evolved, changes(schema, evolved, roles)


def _merge_type(current: pa.DataType, incoming: pa.DataType) -> pa.DataType:
    """The type a column of type ``current`` takes to hold ``incoming`` values: the wider
    number when ``incoming`` widens it (fields a struct gains added), else ``current``
    (the write's own cast then decides: a batch of strings is not taken to turn a number
    column into a string one; :func:`evolve` does that when asked)."""
    if current == incoming:
        return current
    if pat.is_dictionary(incoming):
        return _merge_type(current, incoming.value_type)
    if pat.is_struct(current) and pat.is_struct(incoming):
        return pa.struct(_merge_fields(list(current), list(incoming)))
    if pat.is_list(current) and pat.is_list(incoming):
        item = current.value_field
        return pa.list_(item.with_type(_merge_type(item.type, incoming.value_type)))
    if pat.is_map(current) and pat.is_map(incoming) and current.key_type == incoming.key_type:
        item = current.item_field
        return pa.map_(current.key_field, item.with_type(_merge_type(item.type, incoming.item_type)))
    if _is_number(current) and _is_number(incoming) and widening_problem(current, incoming) is None:
        return incoming
    return current


def _merge_fields(
    current: Sequence[pa.Field], incoming: Sequence[pa.Field], fixed: Collection[str] = ()
) -> list[pa.Field]:
    """``current`` fields merged with ``incoming`` ones (those named ``fixed`` keep their
    types: the write's own cast decides), then the fields ``incoming`` adds."""
    given = {f.name: f for f in incoming}
    kept = [f.with_type(_merge_type(f.type, given[f.name].type)) if f.name in given and f.name not in fixed else f
            for f in current]
    names = {f.name for f in current} | set(_RESERVED)  # Hudi's columns are not data to add
    added = [pa.field(f.name, f.type.value_type if pat.is_dictionary(f.type) else f.type)
             for f in incoming if f.name not in names]
    return [*kept, *added]


def merge(current: pa.Schema, incoming: pa.Schema, roles: Roles = Roles()) -> tuple[pa.Schema, list[Change]]:
    """What a table of schema ``current`` becomes to take a batch of schema ``incoming``:
    its new columns (nested ones too) added, nullable, at the end; its wider number types
    taken;
    columns it lacks or has narrower kept as they are, and record-key and partition
    columns too (their values are cast, or refused, as the batch is written). The schema
    and its changes (none: the batch fits), or :class:`SchemaEvolutionError` when the
    table may not take them."""
    fixed = {*roles.record_key, *roles.partition}
    merged = pa.schema(_merge_fields(list(current), list(incoming), fixed), metadata=current.metadata)
    untyped = [f.name for f in merged if pat.is_null(f.type)]
    if untyped:
        raise SchemaEvolutionError(
            f"new columns {untyped} hold only nulls of no type: give them a type to add them to the table"
        )
    if merged.equals(current):
        return current, []
    return merged, changes(current, merged, roles)


def project_array(array: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """Values of an older type read as ``target`` (a widening of it: struct fields it lacks
    become null, numbers widen, integers become their decimal strings). An integer read
    as a float rounds, as Avro's promotion does; every other cast must keep the value."""
    if array.type == target:
        return array
    return array.cast(target, safe=not (pat.is_integer(array.type) and pat.is_floating(target)))


def project(data: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table | pa.RecordBatch:
    """``data`` (rows written under an older schema) with exactly ``schema``'s columns:
    columns it lacks null, the others read up to their newer types."""
    if data.schema.equals(schema):
        return data
    columns = [
        project_array(data.column(f.name), f.type) if f.name in data.schema.names else pa.nulls(data.num_rows, f.type)
        for f in schema
    ]
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.Table.from_arrays(columns, schema=schema)
