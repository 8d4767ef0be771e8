"""Ingest comparison in one run, same batches, same disk: table-format peers against the ceiling.

    .venv/bin/python bench/peers_report.py [--dir DIR] [--rows-per-batch 10000] [--batches 100]
        [--visible-batches 20] [--pk-python-batches 30] [--window 8] [--rounds 3]

1. ``bench/peers/setup.sh`` creates or reuses the peer venv (pypaimon pins pyarrow<20);
2. ``bench/peers/run_peers.py`` runs there: deltalake appends and pypaimon commits, with
   write-to-visible latency from a reader process;
3. ``bench/ceiling.py`` runs here: the disk alone, then Ray and Flight into a bare receiver.

Prints one table and writes bench/results/peers.json. ``vs disk`` is a system's rows/s over
the disk-only ceiling's. Callers with more systems (memtier) pass their result dicts, made by
``bench.batches.summarize``, to ``write_report`` with the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import digest, make_batches
from bench.ceiling import device_of, run_ceiling, scratch_dir
from bench.common import report

PEERS_DIR = Path(__file__).resolve().parent / "peers"
HEADER = ["system", "batches", "rows/s", "MB/s", "vs disk", "ack p50 ms", "ack p99 ms",
          "visible p50 ms", "visible p99 ms"]
BASELINE = "disk-only"


def peer_results(root: Path, rows: int, batches: int, visible_batches: int,
                 pk_python_batches: int) -> dict[str, Any]:
    """Set up the peer venv if needed and run ``run_peers.py`` in it; its JSON output."""
    setup = subprocess.run(["bash", str(PEERS_DIR / "setup.sh")], check=True,
                           stdout=subprocess.PIPE, text=True)
    python = setup.stdout.strip().splitlines()[-1]
    command = [python, str(PEERS_DIR / "run_peers.py"), "--dir", str(root),
               "--rows-per-batch", str(rows), "--batches", str(batches),
               "--visible-batches", str(visible_batches),
               "--pk-python-batches", str(pk_python_batches)]
    run = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(run.stdout)


def write_report(results: Sequence[dict[str, Any]], extra: dict[str, Any]) -> Path:
    """Print the comparison table of ``summarize`` dicts; write bench/results/peers.json."""
    baseline = next(r["rows_per_s"] for r in results if r["system"] == BASELINE)
    rows = [[r["system"], r["batches"], r["rows_per_s"], r["mb_per_s"],
             round(r["rows_per_s"] / baseline, 3), r["ack_p50_ms"], r["ack_p99_ms"],
             r.get("visible_p50_ms", "-"), r.get("visible_p99_ms", "-")] for r in results]
    return report("peers", HEADER, rows, {**extra, "results": list(results)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where tables and files go, in new subdirectories peers/ and "
                        "ceiling/ (default: a temporary dir under /tmp, removed after)")
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--visible-batches", type=int, default=20)
    parser.add_argument("--pk-python-batches", type=int, default=30,
                        help="cap on ingest batches for the slow pure-Python pypaimon PK writer")
    parser.add_argument("--window", type=int, default=8, help="in-flight batches when pipelined")
    parser.add_argument("--rounds", type=int, default=3, help="ceiling runs per cell (median)")
    args = parser.parse_args()

    batches = make_batches(args.batches, args.rows_per_batch)
    load_before = os.getloadavg()
    with scratch_dir(args.dir) as root:
        (root / "peers").mkdir()
        (root / "ceiling").mkdir()
        peers = peer_results(root / "peers", args.rows_per_batch, args.batches,
                             args.visible_batches, args.pk_python_batches)
        if peers["digest"] != digest(batches):
            raise RuntimeError("the peer venv generated different batches; compare nothing")
        ceiling = run_ceiling(batches, root / "ceiling", args.window, args.rounds)
        where = {"dir": str(root), "device": device_of(root)}
    write_report(ceiling + peers["results"], {
        **where,
        "rows_per_batch": args.rows_per_batch,
        "digest": peers["digest"],
        "peer_versions": peers["versions"],
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "mb": "logical Arrow bytes (RecordBatch.nbytes) / 1e6",
    })


if __name__ == "__main__":
    main()
