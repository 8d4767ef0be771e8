"""Every fenced code block of README.md and docs/*.md runs or is checked, so none goes stale
(tests/support/docblocks.py says how a block asks to be treated):

* python blocks are executed in a temporary working directory; those that need a local
  cluster or Spark (directive ``ray`` or ``spark``) are compiled and checked here and
  executed by the slow part, tests/integration/test_docs_run.py; those that need other
  hosts, HDFS or a Hudi bundle (``check "REASON"``) are compiled and their calls of
  memtier's API bound to its signatures, their config keys checked;
* bash blocks: ``memtier`` command lines are parsed by the CLI's own parser and their
  ``--config``/``--option`` keys checked against memtier/config.py, and ``memtier tls-init``
  is run for real; heavy commands are checked, not run: ``scripts/demo.sh`` (its arguments
  parsed as ``memtier demo``'s), ``scripts/test.sh`` (paths and markers), ``scripts/setup.sh``
  and ``scripts/hdfs.sh`` (each argument named by the script), ``memtier start|status|...``
  (they need or run a cluster), ``.venv/bin/python -m bench.X`` (the module exists and takes
  each flag), ``export`` (a setting's variable);
* text blocks (what memtier printed): ``$`` lines are checked as commands, every phrase of
  the output must be in memtier's source;
* properties blocks (catalog files) must be exactly what memtier.catalog writes for their
  metastore; XML must parse; SQL must read the ``_ro``/``_rt`` view of a table the docs
  create (the slow part runs the queries of the ``memtier`` catalog on a real Trino; the
  Spark SQL one, which needs Hudi's Spark bundle and a Hive Metastore, is checked only).

A failing block fails its own test case, named ``FILE:LINE``.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from tests.support import doccheck
from tests.support.docblocks import ROOT, Block, all_blocks, directive_error

BLOCKS = all_blocks()


def _ids(block: Block) -> str:
    return block.where


def test_the_docs_have_blocks_of_every_kind() -> None:
    kinds = {b.kind for b in BLOCKS}
    assert {"python", "bash", "text", "properties", "sql"} <= kinds, f"the extraction lost its way: {kinds}"


@pytest.mark.parametrize("block", BLOCKS, ids=_ids)
def test_block(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = directive_error(block)
    assert wrong is None, f"{block.where}: {wrong}"
    monkeypatch.chdir(tmp_path)  # blocks write relative paths; bash blocks read what earlier lines wrote
    problems = _problems(block, tmp_path, monkeypatch)
    assert not problems, f"{block.where} ({block.kind} block):\n" + "\n".join(problems)


def _problems(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    if block.kind == "python":
        problems = doccheck.check_python(block.code)
        if block.mode == "run" and not problems:
            problems = _run_python(block, tmp_path, monkeypatch)
        return problems
    if block.kind == "bash":
        if block.directive == ("synopsis",):
            return doccheck.check_synopsis(block.code)
        return [p for argv in doccheck.command_lines(block.code) for p in doccheck.check_command(argv, tmp_path)]
    if block.kind == "text":
        return doccheck.check_output(block.code, tmp_path)
    if block.kind == "properties":
        return doccheck.check_properties(block.code)
    if block.kind == "xml":
        return doccheck.check_xml(block.code)
    return doccheck.check_sql(block.code, doccheck.created_tables())


def _run_python(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    script = tmp_path / "block.py"
    script.write_text(block.code)
    try:
        runpy.run_path(str(script), run_name="__doc__")
    except Exception as e:  # noqa: BLE001 - the block's failure, reported with its place
        return [f"raised {type(e).__name__}: {e}"]
    return []


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "exec scripts/test.sh\n" in ci, ".ci/run no longer runs scripts/test.sh: update the README"
    readme = (ROOT / "README.md").read_text()
    assert "\nscripts/test.sh          #" in readme, "the README's test command is not scripts/test.sh"


def test_a_broken_block_fails_naming_its_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test can fail: a doc with a wrong flag, an undeclared key and a raising block."""
    doc = tmp_path / "broken.md"
    doc.write_text("text\n\n```bash\nmemtier start --no-such-flag\n```\n\n"
                   "```python\nraise ValueError('stale example')\n```\n\n"
                   "```properties\nconnector.name=hudi\nhive.metastore.uri=thrift://h:9083\nhive.cache=none\n```\n")
    from tests.support import docblocks

    monkeypatch.setattr(docblocks, "ROOT", tmp_path)
    found = docblocks.blocks(doc)
    assert [b.where for b in found] == ["broken.md:3", "broken.md:7", "broken.md:11"]
    monkeypatch.chdir(tmp_path)
    assert [bool(_problems(b, tmp_path, monkeypatch)) for b in found] == [True, True, True]
