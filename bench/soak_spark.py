"""The chaos soak's Spark driver, a process of its own so the soak can SIGKILL it (its
process group: the driver and its JVM) and start it again from its checkpoint.

    python -m bench.soak_spark ADDRESS WORKDIR [--available-now]

Under WORKDIR (laid out by :class:`bench.soak.SparkDriver`):

* ``in/``: JSON files the soak drops (``id``, ``ts``, ``v``), read by a Structured
  Streaming query into the memtier table ``streamed`` through ``format("memtier")``,
  up to 20 files a micro-batch (a driver started again has a
  backlog to catch up on; checkpoint in ``checkpoint/``);
* ``backfill/``: backfill requests, ``NAME.parquet`` rows of the keyed table; each is
  written with ``df.write.format("memtier")`` into ``keyed`` (again after a failure, or
  after a restart that found no ``NAME.done``), then ``NAME.done`` is made.

The query triggers every second until the process is killed; with ``--available-now`` it
takes what is there (files and backfill requests), prints ``done`` and exits.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

STREAMED = "streamed"
KEYED = "keyed"
STREAM_SCHEMA = "id long, ts long, v string"


def backfill_pending(spark: object, backfills: Path) -> None:
    """Write every backfill request that has no ``.done`` yet, oldest first (retried
    until it succeeds)."""
    for request in sorted(backfills.glob("*.parquet")):
        done = request.with_suffix(".done")
        while not done.exists():
            try:
                df = spark.read.parquet(str(request))  # type: ignore[attr-defined]
                df.write.format("memtier").option("table", KEYED).mode("append").save()
            except Exception:  # noqa: BLE001 - a refused backfill is retried, and logged
                print(f"backfill {request.name} failed, again in 1 s:\n{traceback.format_exc(limit=3)}",
                      file=sys.stderr, flush=True)
                time.sleep(1.0)
                continue
            partial = done.with_suffix(".partial")
            partial.write_text("done\n")
            partial.rename(done)
            print(f"backfill {request.name} done", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args(argv)

    import memtier.spark
    from tests.support.spark import local_session

    spark = local_session("memtier-soak")
    memtier.spark.register(spark, address=args.address)
    stream = (spark.readStream.schema(STREAM_SCHEMA).option("maxFilesPerTrigger", 20)
              .json(str(args.workdir / "in")))
    writer = (stream.writeStream.format("memtier").option("table", STREAMED)
              .option("checkpointLocation", str(args.workdir / "checkpoint")))
    backfills = args.workdir / "backfill"
    if args.available_now:
        writer.trigger(availableNow=True).start().awaitTermination()
        backfill_pending(spark, backfills)
        print("done", flush=True)
        spark.stop()
        return
    query = writer.trigger(processingTime="1 second").start()
    print("started", flush=True)
    while query.isActive:  # the query runs on Spark's threads; backfills on this one (a
        backfill_pending(spark, backfills)  # thread of its own does not see format("memtier"))
        time.sleep(0.5)
    query.awaitTermination()  # raises why the query failed: the soak starts a new driver


if __name__ == "__main__":
    main()
