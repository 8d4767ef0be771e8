"""Every benchmark runs end to end at a tiny size and writes its JSON report, so a change
that breaks one is caught here rather than on the next measuring day. Sizes are far too
small to mean anything: nothing is asserted about timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

RUNS = {
    "hudi_write": ["-m", "bench.hudi_write", "--rows", "20000", "--repeat", "1"],
    "adopt": ["-m", "bench.adopt", "--rows", "20000", "--repeat", "1"],
    # this checkout against itself (the real baseline is a checkout from before the change)
    "hudi_occ": ["-m", "bench.hudi_occ", "--baseline", str(REPO), "--baseline-python", sys.executable,
                 "--flushes", "3", "--rounds", "1", "--parts", "3"],
    "hudi_read": ["-m", "bench.hudi_read", "--rows", "20000", "--repeat", "1"],
    "mdt_compaction": ["-m", "bench.mdt_compaction", "--commits", "12", "--rounds", "1"],
    "avro_codec": ["bench/avro_codec.py", "--rows", "20000", "--repeat", "1", "--fastavro-rows", "500"],
    "wal": ["-m", "bench.wal", "--seconds", "0.1", "--rounds", "1"],
    "background_io": ["-m", "bench.background_io", "--seconds", "0.3", "--rounds", "1", "--file-mb", "4"],
    "rpc": ["bench/rpc.py", "--seconds", "0.3", "--slice", "0.1", "--rows", "1000"],
    "compaction": ["-m", "bench.compaction", "--rows", "20000", "--repeat", "1", "--staleness-seconds", "4",
                   "--warmup", "0", "--rate", "2000", "--peak-seconds", "0.5", "--peak-compact-rows", "20000"],
    "trino_read": ["-m", "bench.trino_read", "--rows", "20000", "--repeat", "1", "--fast-start"],
    "trino_staleness": ["-m", "bench.trino_staleness", "--seconds", "8", "--warmup", "0", "--keys", "500",
                        "--rows-per-batch", "100", "--interval", "0.2", "--presto"],
    "ceiling": ["bench/ceiling.py", "--batches", "4", "--rows-per-batch", "1000", "--rounds", "1"],
    "flush_offload": ["-m", "bench.flush_offload", "--rounds", "1", "--seconds", "0.5", "--rate", "10",
                      "--rows", "500", "--flush-every", "0.2"],
    "flush_round": ["-m", "bench.flush_round", "--writes", "20", "--rows", "100", "--keys", "500", "--repeat", "1"],
    "sustained": ["-m", "bench.sustained", "--batches", "8", "--rows-per-batch", "1000", "--threads", "2",
                  "--buckets", "1,4"],
    "freshness": ["-m", "bench.freshness", "--sizes", "2000", "--rows-per-batch", "1000",
                  "--visible-batches", "2", "--cost-reads", "1"],
    "lookup": ["-m", "bench.lookup", "--sizes", "2000", "--lookups", "5", "--baseline-lookups", "1",
               "--visible-batches", "2", "--rows-per-batch", "100"],
    "log_lookup": ["-m", "bench.log_lookup", "--rows", "20000", "--lookups", "3"],
    "memory_lookup": ["-m", "bench.memory_lookup", "--sizes", "2000", "--lookups", "5", "--rows-per-write", "1000"],
    "hudi_spark_peer": ["-m", "bench.hudi_spark_peer", "--batches", "2", "--rows-per-batch", "1000",
                        "--visible-batches", "1"],
    "hudi_spark_peer_read": ["-m", "bench.hudi_spark_peer_read", "--rows", "2000", "--buckets", "1",
                             "--repeat", "1"],
    "spark": ["-m", "bench.spark", "--rows", "20000", "--repeat", "1", "--files", "2"],
    "ingest": ["-m", "bench.ingest", "--no-peers", "--batches", "4", "--rows-per-batch", "1000",
               "--threads", "2", "--buckets", "1,2", "--rounds", "1", "--paced-seconds", "0.5",
               "--budget", "1MB", "--budget-factor", "2", "--drain-seconds", "30",
               "--peer-batches", "2", "--visible-batches", "2"],
    "tls": ["-m", "bench.tls", "--batches", "4", "--rows-per-batch", "1000", "--threads", "2", "--buckets", "1",
            "--rounds", "1", "--paced-seconds", "0.5", "--pairs", "20", "--pair-interval", "0.01"],
    "schema_change": ["-m", "bench.schema_change", "--seconds", "3", "--rate", "10", "--rows-per-batch", "200",
                      "--alters", "2"],
    "write_kinds": ["-m", "bench.write_kinds", "--batches", "3", "--rows-per-batch", "1000",
                    "--buckets", "2", "--rounds", "1"],
    "hdfs_ingest": ["-m", "bench.hdfs_ingest", "--batches", "3", "--rows-per-batch", "1000",
                    "--buckets", "1,2", "--rounds", "1"],
    # every fault kind at least once (the run ends once each struck and writes were acknowledged
    # after the last, ~70-80 s; 240 s at most), and the checker's verdict: exit 1 on any row
    # lost or doubled
    # (the server's own WAL retention: with --wal-retention-bytes 0 two runs lost acknowledged
    # writes, issue 29, two causes fixed since, not yet proven the only ones; stale lookups,
    # none in a 20-minute run since their causes were fixed, are reported, not failed on,
    # until more runs have passed: docs/limits.md)
    "soak": ["-m", "bench.soak", "--seconds", "240", "--until-each-kind", "--fault-every", "4",
             "--backfill-every", "15", "--wal-retention-bytes", "default", "--allow-stale-reads"],
    "ingest-memory": ["-m", "bench.ingest", "--memory-only", "--batches", "4", "--rows-per-batch",
                      "1000", "--threads", "2", "--budget", "1MB", "--budget-factor", "2",
                      "--drain-seconds", "30"],
}


#: Seconds a run may take: the soak ~4 min alone here, ~8-10 with other suites on the cores.
SOAK_TIMEOUT_S = 1200


def _run(command: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``command`` run to its end; past ``timeout`` it is asked to stop (SIGTERM: the soak
    then stops the Ray nodes and Spark driver it started), killed a minute later, and the
    test fails with what it printed."""
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        pytest.fail(f"{command[2]} ran past {timeout:.0f} s\nstderr:\n{stderr[-3000:]}\nstdout:\n{stdout[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.timeout(SOAK_TIMEOUT_S + 60)) if n == "soak" else n for n in sorted(RUNS)
])
def test_benchmark_runs_and_reports(name: str, tmp_path: Path) -> None:
    env = {**os.environ, "MEMTIER_BENCH_RESULTS": str(tmp_path)}
    done = _run([sys.executable, *RUNS[name]], env, SOAK_TIMEOUT_S if name == "soak" else 600)
    # (the soak's verdict, the checker's table, is on stdout: a failure shows its end too)
    assert done.returncode == 0, f"stderr:\n{done.stderr[-3000:]}\nstdout:\n{done.stdout[-3000:]}"
    report = json.loads((tmp_path / f"{name}.json").read_text())
    assert report["rows"], report
    if name == "soak":
        assert set(report["faults"]) == set(report["kinds"]), f"a fault kind never struck: {report['fault_log']}"
