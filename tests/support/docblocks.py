"""Every fenced code block of README.md and docs/*.md, with how the doc test runs or checks it.

A block may be preceded, on the line right before its opening fence, by a directive:

    <!-- doctest: WORD ... -->

For ``python`` blocks (without a directive a block is executed as it is, in a temporary
working directory, by the fast tests):

* ``ray``: the block starts a local cluster itself; executed by the slow tests
  (tests/integration/test_docs_run.py), which shut down what it leaves running.
* ``ray fixture=orders``: executed by the slow tests with ``memtier``, ``pa``, ``schema``,
  ``cluster`` and ``client`` already there: a local cluster with the ``orders`` table of
  the README (id, ts, city, amount; key id, ordering ts, partition city, 4 buckets), rows in it.
* ``spark``: executed by the slow tests with ``spark``, a local SparkSession, and a running
  local cluster whose address is in ``MEMTIER_CLUSTER_ADDRESS``, holding that ``orders``
  table; ``incoming/`` and ``history/`` in the working directory hold JSON files of orders rows.
* ``check "REASON"``: not executed (REASON says what it would need: other hosts, HDFS, a
  Hudi bundle); compiled, and every call of memtier's API and every config key checked
  (:func:`tests.support.doccheck.check_python`).

For ``bash`` blocks, ``synopsis`` marks usage lines (``memtier CMD [--flag ...]``), whose
commands and flags are checked against the CLI's parser. Other kinds take no directive.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("python", "bash", "text", "properties", "xml", "sql")
_FENCE = re.compile(r"^```(\S*)\s*$")
_DIRECTIVE = re.compile(r"^<!-- doctest: (.*) -->$")
PYTHON_MODES = ("run", "ray", "spark", "check")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language and text, and its directive's words."""

    path: Path
    line: int  # of the opening fence, 1-based
    kind: str
    code: str
    directive: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def mode(self) -> str:
        """For python blocks: run, ray, spark or check."""
        return self.directive[0] if self.directive else "run"

    @property
    def fixture(self) -> str | None:
        return next((w.split("=", 1)[1] for w in self.directive if w.startswith("fixture=")), None)


def doc_paths() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file; an unclosed fence is an error."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{path.relative_to(ROOT)}:{i + 1}: a code block that is never closed")
        directive = _DIRECTIVE.match(lines[i - 1]) if i else None
        words = tuple(shlex.split(directive.group(1))) if directive else ()
        found.append(Block(path, i + 1, opening.group(1), "\n".join(lines[i + 1:end]) + "\n", words))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in doc_paths() for b in blocks(path)]


def directive_error(block: Block) -> str | None:
    """What is wrong with the block's language or directive, or None."""
    if block.kind not in KINDS:
        return f"unknown block language {block.kind!r} (the doc test knows {', '.join(KINDS)})"
    if not block.directive:
        return None
    if block.kind == "python":
        if block.mode not in PYTHON_MODES[1:]:
            return f"unknown python directive {block.directive}"
        if block.mode == "check" and len(block.directive) != 2:
            return 'a check directive needs its reason: <!-- doctest: check "REASON" -->'
        extra = [w for w in block.directive[1:] if block.mode != "check" and w != "fixture=orders"]
        if extra:
            return f"unknown directive words {extra}"
        return None
    if block.kind == "bash" and block.directive == ("synopsis",):
        return None
    return f"no directive applies to a {block.kind} block: {block.directive}"
