"""``scripts/demo.sh`` as a new user runs it: on a fresh clone (no .venv, no .cache), it sets
up only what the demo uses and the demo ends with hudi-rs reading what memtier served;
then ``scripts/demo.sh --spark`` adds PySpark to the same clone and the Spark pipeline's
summary shows every key written read alike by memtier, Spark and hudi-rs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ROOT = Path(__file__).resolve().parents[2]
#: A cold set-up and the demo, on a loaded 2-core machine, with room to spare.
TIMEOUT = 1200


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh clone of this repository's committed state."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    target = tmp_path_factory.mktemp("fresh") / "memtier"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
    yield target


def _run_demo(clone: Path, *args: str) -> str:
    """Run scripts/demo.sh in the clone as from a plain shell; its output (it must succeed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYSPARK_PYTHON")}
    done = subprocess.run(["scripts/demo.sh", *args], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return done.stdout


def _installed(clone: Path, package: str) -> bool:
    return any(clone.glob(f".venv/lib/python3*/site-packages/{package}/__init__.py"))


def test_the_demo_sets_up_only_what_it_uses_and_ends_with_hudi_rs_reading_the_same_rows(
    clone: Path, tmp_path: Path
) -> None:
    data = tmp_path / "demo-data"
    out = _run_demo(clone, "--seconds", "2", "--path", str(data))
    served = re.search(r"memtier read\(latest\) after the flush: ([\d,]+) rows", out)
    counts = re.search(r"row counts: memtier ([\d,]+), hudi-rs ([\d,]+): match", out)
    assert served and counts, out
    assert served.group(1) == counts.group(1) == counts.group(2) != "0", out
    assert "every row (id, ts, name, value, city): identical" in out
    assert (data / "tables" / "demo" / ".hoodie" / "hoodie.properties").exists()  # kept under --path
    assert "\r" not in out  # not a terminal: plain lines
    assert _installed(clone, "ray") and _installed(clone, "hudi")
    assert not _installed(clone, "pyspark"), "the demo's set-up installed PySpark, which only --spark uses"
    assert not (clone / ".cache").exists(), "the demo's set-up fetched test servers"


def test_the_spark_demo_ends_with_its_summary_and_the_lines_for_a_spark_job(clone: Path) -> None:
    out = _run_demo(clone, "--spark", "--seconds", "6")
    summary = out[out.rindex("summary"):]
    assert re.search(r"stream +[\d,]+ rows/s through \d+ micro-batches; each readable .+ after Spark completed it "
                     r"\(p50; p99 .+\)", summary), out
    table = re.search(r"table +([\d,]+) rows: ([\d,]+) keys from the stream, ([\d,]+) from the backfill, each once",
                      summary)
    assert table, out
    assert re.search(rf"Spark read {table.group(1)} rows, hudi-rs the same rows", summary), out
    assert "memtier.spark.register(spark)" in summary and 'writeStream.format("memtier")' in summary
    assert not (clone / ".cache").exists(), "the demo's set-up fetched test servers"
