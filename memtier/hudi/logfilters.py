"""Bloom filters of the keys in each log file a commit wrote, in a file of the commit's own.

A lookup that gives a key without its partition reads the key's bucket in every
partition. Base files answer through the key filters in their footers
(:mod:`memtier.hudi.keyfilter`); a log file has no footer to put one in, so a reader that
has not decoded a new log file yet decoded it (its records and their key index) on the
first lookup after the commit that wrote it, in every partition: five log files for one
key in ``memtier demo``. With these filters it decodes only the log files that may hold
the key (~1% false positives), and in it only the data blocks that may hold the key (a
flush writes a log file's records as blocks of :data:`~memtier.hudi.filegroup.LOG_BLOCK_ROWS`:
a lookup decodes one block of 16,384 records, not the whole file).

A commit of a partitioned table writes, before it completes,
``.hoodie/.aux/memtier/keyfilters/<instant>.json``: ``{"version": 2, "files": {<log file
path in the table>: {"size": <bytes>, "blocks": [{<footer entry name>: <entry>}, ...]}}}``,
one filter set per data block in the file's order, the entries as base files' footers
hold them, for each of its log files without deletes (a delete block's keys are
record-key strings, which the filters do not cover); files of version 1 (one filter set
for the whole file) are ignored. Readers use an entry only when its commit has
completed (a rolled-back flush's file is ignored), and only for a log file of exactly
that size (blocks another writer appended later are not in it). They look at the files of
the newest :data:`READ_WINDOW` commits; writers keep those of the newest :data:`KEEP`.
Hudi readers never look in ``.hoodie/.aux``; a file missing or unreadable only means the
log files are decoded, as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from memtier.errors import MemtierError
from memtier.hudi.keyfilter import KeyBloom, footer_filters, key_filter_metadata
from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import Timeline
from memtier.io import join

if TYPE_CHECKING:
    from memtier.hudi.cache import SliceCache

__all__ = ["KEEP", "READ_WINDOW", "LogFilter", "delete_log_filters", "log_filters", "rename_log_filters",
           "write_log_filters"]

log = logging.getLogger(__name__)

_DIR = (".hoodie", ".aux", "memtier", "keyfilters")
_VERSION = 2
#: Readers look at the filter files of this many newest commits ...
READ_WINDOW = 16
#: ... and writers keep this many (a reader may still be listing the timeline before).
KEEP = 2 * READ_WINDOW


@dataclass(frozen=True)
class LogFilter:
    """The key filters of one log file as written: its size then, and for each of its data
    blocks in order, a filter per key column."""

    size: int
    blocks: tuple[Mapping[str, KeyBloom], ...]

    @property
    def nbytes(self) -> int:
        """Bytes of its encoded filters."""
        return sum(len(bloom.encoded) for block in self.blocks for bloom in block.values())


def _folder(meta: TableMeta) -> str:
    return join(meta.base_path, *_DIR)


def write_log_filters(meta: TableMeta, instant: str, files: Mapping[str, tuple[int, list[pa.Table]]]) -> None:
    """Write the filters of ``instant``'s log files (path in the table -> its size and the
    key columns of the records of each of its data blocks), then delete the files of
    commits older than the newest :data:`KEEP`. A failure is logged, not raised: without
    the file, readers decode."""
    if not files:
        return
    entries = {
        path: {"size": size, "blocks": [key_filter_metadata(keys, meta.filtered_key_fields) for keys in blocks]}
        for path, (size, blocks) in files.items()
    }
    folder = _folder(meta)
    try:
        meta.io.write_atomic(join(folder, f"{instant}.json"),
                             json.dumps({"version": _VERSION, "files": entries}).encode())
        kept = sorted(e.name for e in meta.io.list_dir(folder) if e.name.endswith(".json"))
        for name in kept[:-KEEP]:
            meta.io.delete(join(folder, name))
    except (OSError, MemtierError) as e:
        log.warning("could not write the log key filters of %s in %s: %s", instant, meta.base_path, e)


def rename_log_filters(meta: TableMeta, instant: str, renamed: Mapping[str, str]) -> None:
    """``instant``'s log files were renamed (path in the table -> new path): their filters
    follow. A failure is logged, not raised: a file without filters is decoded."""
    path = join(_folder(meta), f"{instant}.json")
    try:
        content = json.loads(meta.io.read_bytes(path))
        files = content.get("files") or {}
        if not any(old in files for old in renamed):
            return
        content["files"] = {renamed.get(name, name): entry for name, entry in files.items()}
        meta.io.write_atomic(path, json.dumps(content).encode())
    except FileNotFoundError:
        return
    except (OSError, ValueError, MemtierError) as e:
        log.warning("could not rename the log key filters of %s in %s: %s", instant, meta.base_path, e)


def delete_log_filters(meta: TableMeta, instant: str) -> None:
    """Delete ``instant``'s filters (a rolled-back write's), if it wrote any."""
    meta.io.delete(join(_folder(meta), f"{instant}.json"))


def log_filters(meta: TableMeta, visible: Timeline, cache: SliceCache) -> dict[str, LogFilter]:
    """The filters of the log files that the newest :data:`READ_WINDOW` completed commits
    of ``visible`` wrote, by path in the table (each commit's file read once per cache)."""
    recent = tuple(i.timestamp for i in visible.completed()[-READ_WINDOW:])

    def merged() -> dict[str, LogFilter]:
        found: dict[str, LogFilter] = {}
        for instant in recent:
            path = join(_folder(meta), f"{instant}.json")
            found.update(cache.get(("log filters", path), lambda path=path: _read(meta, path)))
        return found

    return cache.get(("log filters", meta.base_path, recent), merged)


def _read(meta: TableMeta, path: str) -> dict[str, LogFilter]:
    """One commit's filters; none when it wrote no file or the file is unreadable."""
    try:
        content = json.loads(meta.io.read_bytes(path))
        if content.get("version") != _VERSION:
            return {}
        return {
            file: LogFilter(int(entry["size"]), tuple(
                footer_filters({k.encode(): v.encode() for k, v in block.items()}) for block in entry["blocks"]
            ))
            for file, entry in content["files"].items()
        }
    except FileNotFoundError:
        return {}
    except (OSError, MemtierError, ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("ignoring the log key filters at %s: %s", path, e)
        return {}
