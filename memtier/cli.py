"""The ``memtier`` command.

    memtier start  [--path DIR] [--table-servers N] [--config KEY=VALUE ...]
    memtier status [--address grpc[+tls]://HOST:PORT] [--token T] [--tls-ca PEM] [--json]
    memtier compact|cluster|clean TABLE [--address ...] [--token T] [--no-wait]
    memtier alter  TABLE [--add NAME:TYPE ...] [--widen NAME:TYPE ...] [--option KEY=VALUE ...] [--address ...]
    memtier adopt PATH [--name NAME] [--buckets N] [--address ...] [--token T] [--tls-ca PEM] [--no-wait]
    memtier sync-catalog [TABLE ...] [--metastore DIR|thrift://HOST:PORT] [--database DB] [--address ...] [--token T]
    memtier sync-catalog --path HUDI_TABLE [--name NAME] --metastore DIR|thrift://HOST:PORT [--database DB]
    memtier demo   [--spark] [--path DIR] [--seconds S] [--rows-per-batch N]
    memtier tls-init DIR [--host NAME|IP ...] [--days N]

Exit codes: 0 success; 1 the command ran and failed; 2 it could not run as asked (a
usage error, a bad setting, nothing answering at the address); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from memtier.cli_format import Console, request_line, status_report
from memtier.config import ClusterConfig, check, load
from memtier.errors import InvalidArgumentError, MemtierError, RpcError, TlsError

if TYPE_CHECKING:
    from memtier.master.service import MasterProxy

__all__ = ["main"]



def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return value

    return parse


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


_TYPES = {
    "tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(), "integer": pa.int32(),
    "bigint": pa.int64(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
    "string": pa.string(), "binary": pa.binary(), "boolean": pa.bool_(), "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def _column(text: str) -> tuple[str, pa.DataType]:
    """``NAME:TYPE`` as (name, Arrow type)."""
    name, sep, kind = text.rpartition(":")
    kind = kind.strip().lower()
    decimal = _DECIMAL.fullmatch(kind)
    if not sep or not name or (kind not in _TYPES and decimal is None):
        raise argparse.ArgumentTypeError(
            f"expected NAME:TYPE with TYPE one of {', '.join(_TYPES)} or decimal(P,S), got {text!r}")
    return name.strip(), pa.decimal128(int(decimal[1]), int(decimal[2])) if decimal else _TYPES[kind]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memtier", description="An in-memory, WAL-backed write tier over Apache Hudi tables.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    start = commands.add_parser("start", help="run a cluster on this machine until Ctrl-C")
    start.add_argument("--path", default="./memtier-data", help="where tables and WALs live (default: %(default)s)")
    start.add_argument("--table-servers", type=_positive(int), default=2, metavar="N",
                       help="table servers to start (default: %(default)s)")
    start.add_argument("--config", type=_key_value, action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                       help="cluster.*, tableserver.*, wal.*, services.* and catalog.* settings (see docs/configuration.md)")
    start.set_defaults(run=_start)

    status = commands.add_parser("status", help="table servers, tables, table services and open transactions")
    _add_address(status)
    status.add_argument("--json", action="store_true", help="print JSON instead of tables")
    status.set_defaults(run=_status)

    for kind, command, text in (("compaction", "compact", "compact a table's file slices into new base files"),
                                ("clustering", "cluster", "rewrite a table's partitions into one file group a bucket"),
                                ("clean", "clean", "delete file slices retention no longer keeps")):
        service = commands.add_parser(command, help=text)
        service.add_argument("table", help="the table")
        _add_address(service)
        service.add_argument("--no-wait", action="store_true", help="queue it and return at once")
        if kind == "clustering":
            service.add_argument("--partition", action="append", dest="partitions", metavar="PATH",
                                 help="a partition to cluster (repeatable; default: all)")
            service.add_argument("--sort", default="", metavar="COL[,COL]", help="sort columns")
        service.set_defaults(run=_service, kind=kind)

    adopt = commands.add_parser(
        "adopt", help="serve a Hudi table Apache Hudi wrote, converting it into buckets if it has none",
        description="Register the Hudi table at PATH with the cluster. A table written with Hudi's default "
                    "index (no bucket index) is converted once into N file groups per partition by a "
                    "clustering of the table-service pool (readable throughout; writes wait for it); "
                    "Hudi's metadata table is dropped as Hudi drops it when disabled.")
    adopt.add_argument("path", help="the Hudi table's base path")
    adopt.add_argument("--name", help="the name to serve it under (default: its hoodie.table.name)")
    adopt.add_argument("--buckets", type=_positive(int), metavar="N",
                       help="buckets per partition, for a table without a bucket index")
    _add_address(adopt)
    adopt.add_argument("--no-wait", action="store_true", help="start the conversion and return at once")
    adopt.set_defaults(run=_adopt)
    alter = commands.add_parser(
        "alter", help="add nullable columns, widen types, set table options (schema.evolution)",
        description="Change a table's schema while it is written and read: add nullable columns (NAME:TYPE; "
                    "a dotted NAME adds inside a struct column) and widen types (int to bigint or double, "
                    "float to double, decimal precision up, ...). All of it or nothing: a change the table "
                    "cannot take is refused, naming it and why. TYPE: tinyint, smallint, int, bigint, float, "
                    "double, decimal(P,S), string, binary, boolean, date, timestamp.")
    alter.add_argument("table", help="the table")
    alter.add_argument("--add", type=_column, action="append", default=[], metavar="NAME:TYPE",
                       help="a nullable column to add (repeatable)")
    alter.add_argument("--widen", type=_column, action="append", default=[], metavar="NAME:TYPE",
                       help="a column and its wider type (repeatable)")
    alter.add_argument("--option", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                       help="a table option, e.g. schema.evolution=off (repeatable)")
    _add_address(alter)
    alter.set_defaults(run=_alter)

    sync = commands.add_parser(
        "sync-catalog", help="register tables and their partitions in a Hive Metastore or Trino file metastore",
        description="Register memtier tables (NAME_ro and NAME_rt; NAME for copy-on-write) and their "
                    "partitions in a Hive Metastore (thrift://HOST:PORT) or a Trino file metastore "
                    "(hive.metastore=file; a directory), as Hudi's hive-sync does, and print the Trino "
                    "catalog file that reads it.")
    sync.add_argument("tables", nargs="*", metavar="TABLE", help="the cluster's tables to sync (default: all)")
    sync.add_argument("--metastore", metavar="DIR|thrift://HOST:PORT",
                      help="a file-metastore directory or a Hive Metastore's URI (default: the cluster's "
                           "catalog.file-metastore or catalog.hive-metastore)")
    sync.add_argument("--database", help="the metastore database, Trino's schema (default: default)")
    sync.add_argument("--path", metavar="HUDI_TABLE",
                      help="sync the Hudi table at this path instead, without a cluster")
    sync.add_argument("--name", help="with --path: the name to register (default: the Hudi table name)")
    _add_address(sync)
    sync.set_defaults(run=_sync_catalog)

    demo = commands.add_parser("demo", help="stream upserts, watch freshness, read the Hudi table with hudi-rs")
    demo.add_argument("--spark", action="store_true",
                      help='the pipeline on Spark: a streaming query into format("memtier"), a backfill, '
                           "a compaction (needs PySpark and Java)")
    demo.add_argument("--path", help="where the demo's data goes (default: a new temporary directory)")
    demo.add_argument("--seconds", type=_positive(float), metavar="S",
                      help="how long each phase streams, at full speed then at half that rate (default: 5); "
                           "with --spark, how long the stream is measured (default: 15)")
    demo.add_argument("--rows-per-batch", type=_positive(int), metavar="N",
                      help="rows per write (default: 1000); with --spark, per micro-batch (default: 100000)")
    demo.set_defaults(run=_demo)

    tls = commands.add_parser(
        "tls-init", help="make a CA and a server certificate for TLS (a test or a quick start)",
        description="Write DIR/ca.pem, DIR/server.pem and DIR/server.key (0600): a new CA and a certificate "
                    "it signed for this machine (localhost, its loopback addresses, host name and address) "
                    "and every --host, then print the cluster.tls.* settings that use them.")
    tls.add_argument("directory", metavar="DIR", help="where to write them (existing files are not overwritten)")
    tls.add_argument("--host", action="extend", nargs="+", default=[], metavar="NAME|IP",
                     help="another name or address clients reach a master or table server by")
    tls.add_argument("--days", type=_positive(int), default=365, metavar="N",
                     help="how long the certificates are valid (default: %(default)s)")
    tls.set_defaults(run=_tls_init)
    return parser


def _add_address(command: argparse.ArgumentParser) -> None:
    command.add_argument("--address", help="the master, grpc://HOST:PORT or grpc+tls://HOST:PORT "
                                           "(default: $MEMTIER_CLUSTER_ADDRESS)")
    command.add_argument("--token", help="the cluster token, if it has one (default: $MEMTIER_CLUSTER_TOKEN)")
    command.add_argument("--tls-ca", metavar="PEM", help="the CA a grpc+tls:// cluster's certificates are "
                                                         "checked against (default: $MEMTIER_CLUSTER_TLS_CA)")
    command.add_argument("--timeout", type=_positive(float), default=10.0, metavar="SECONDS",
                         help="give up on an unanswered call after this long (default: %(default)s)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed
        return int(e.code or 0)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("memtier: error: a command is required (start, status, alter, sync-catalog or demo)", file=sys.stderr)
        return 2
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print(f"\nmemtier {args.command}: interrupted", file=sys.stderr)
        return 130
    except (InvalidArgumentError, TlsError) as e:
        print(f"memtier {args.command}: error: {e}", file=sys.stderr)
        return 2
    except MemtierError as e:
        print(f"memtier {args.command}: error: {e}", file=sys.stderr)
        return 1


def _start(args: argparse.Namespace) -> int:
    from memtier.cluster import start_local

    options = dict(args.config)
    check(options)
    console = Console()
    with console.task(f"starting Ray, a master and {args.table_servers} table servers (5-15 s)"):
        cluster = start_local(args.path, table_servers=args.table_servers, config=options)
    try:
        tables = cluster.client().list_tables()
        token = ", token=..." if cluster.token else ""
        ca = f', tls_ca="{cluster.tls_ca}"' if cluster.tls_ca else ""
        console.step(f"memtier is running: master at {cluster.address}, {args.table_servers} table servers")
        console.note(f"data:    {cluster.path}")
        console.note(f"tables:  {', '.join(tables) if tables else 'none yet'}")
        console.note(f'Python:  client = memtier.connect("{cluster.address}"{token}{ca})')
        console.note(f'Spark:   memtier.spark.register(spark, address="{cluster.address}"{token}{ca})')
        console.note(f"status:  memtier status --address {cluster.address}" + (" --token ..." if token else "")
                     + (f" --tls-ca {cluster.tls_ca}" if ca else ""))
        variables = ["MEMTIER_CLUSTER_ADDRESS"] + (["MEMTIER_CLUSTER_TOKEN"] if token else []) \
            + (["MEMTIER_CLUSTER_TLS_CA"] if ca else [])
        console.note(f"         or export {' and '.join(variables)}"
                     + ": the memtier command, memtier.connect() and Spark's format(\"memtier\") read them")
        console.note("Ctrl-C stops the cluster.")
        _wait_for_stop_signal()
    finally:
        with console.task("stopping the cluster"):
            cluster.shutdown()
    return 0


def _wait_for_stop_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _master(args: argparse.Namespace) -> tuple[str, MasterProxy]:
    from memtier.master.service import MasterProxy

    configured = load(ClusterConfig)
    address = args.address or configured.address
    if address is None:
        raise InvalidArgumentError("no address: pass --address grpc://HOST:PORT or set MEMTIER_CLUSTER_ADDRESS "
                                   "(memtier start prints it)")
    return address, MasterProxy(address, token=args.token or configured.token,
                                tls_ca=args.tls_ca or configured.tls_ca, timeout=args.timeout)


def _status(args: argparse.Namespace) -> int:
    address, master = _master(args)
    try:
        status = master.status()
    except RpcError as e:
        print(f"memtier status: no memtier cluster answers: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"address": address, **status}, indent=2) if args.json else status_report(address, status))
    return 0


def _service(args: argparse.Namespace) -> int:
    """Ask for a table service, then show its progress until it is done."""

    _, master = _master(args)
    console = Console()
    options = {"partitions": args.partitions, "sort_columns": [c for c in args.sort.split(",") if c]} \
        if args.kind == "clustering" else {}
    try:
        request = master.schedule_service(args.table, args.kind, **options)
    except RpcError as e:
        print(f"memtier {args.command}: no memtier cluster answers: {e}", file=sys.stderr)
        return 2
    if request is None:
        console.step(f"{args.table}: nothing to do (no {args.kind} is due)")
        return 0
    return _follow(args, master, console, request, args.table, args.kind)


def _adopt(args: argparse.Namespace) -> int:
    """Register a Hudi table; follow its conversion into buckets, if it needs one."""
    from memtier.hudi import HudiTable

    name = args.name or HudiTable.open(args.path).config.name
    _, master = _master(args)
    console = Console()
    try:
        described = master.register_table(name, args.path, None, args.buckets)
    except RpcError as e:
        print(f"memtier adopt: no memtier cluster answers: {e}", file=sys.stderr)
        return 2
    console.step(f"{name}: {args.path} registered, {described['buckets']} buckets, {described['table_type']}")
    if described.get("conversion") is None:
        return 0
    console.step(f"{name}: converting its file groups into {described['buckets']} per partition"
                 " (a clustering; reads go on meanwhile, writes wait for it)")
    return _follow(args, master, console, described["conversion"], name, "conversion")


def _follow(args: argparse.Namespace, master: Any, console: Console, request: dict[str, Any], table: str,
            what: str) -> int:
    """Show a table-service request's tasks and progress until it is done (or, with
    ``--no-wait``, once)."""
    from memtier.client import wait_for_request

    shown: set[int] = set()

    def report(current: dict[str, Any]) -> None:
        for task in current["tasks"]:
            if task["task_id"] not in shown:
                shown.add(task["task_id"])
                how = "already pending, joined" if task["joined"] else "planned"
                console.step(f"{task['kind']} {task['instant']} of {table} {how} ({task['file_groups']} file groups)")
        console.live(request_line(current))

    if args.no_wait:
        report(request)
        console.end_live(request_line(request))
        console.note(f"queued as request {request['request_id']}; `memtier status` shows its tasks' progress")
        return 0
    done = wait_for_request(master, request, report)
    console.end_live(request_line(done))
    if done["state"] != "completed":
        print(f"memtier {args.command}: {what} failed: {done['error']}", file=sys.stderr)
        return 1
    return 0


def _alter(args: argparse.Namespace) -> int:
    """Alter a table's schema or options; print its schema afterwards."""
    if not (args.add or args.widen or args.option):
        raise InvalidArgumentError("nothing to change: give --add, --widen or --option")
    _, master = _master(args)
    try:
        before = master.describe_table(args.table)["schema_version"]
        described = master.alter_table(args.table, [pa.field(n, t) for n, t in args.add], dict(args.widen),
                                       dict(args.option))
    except RpcError as e:
        print(f"memtier alter: no memtier cluster answers: {e}", file=sys.stderr)
        return 2
    console = Console()
    version = described["schema_version"]
    changed = f"now schema version {version}" if version != before else f"schema unchanged (version {version})"
    console.step(f"{args.table}: {changed}, schema.evolution={described['options']['schema.evolution']}")
    for field in pa.ipc.read_schema(pa.py_buffer(described["schema"])):
        console.note(f"{field.name}  {field.type}{'' if field.nullable else ' not null'}")
    return 0


def _sync_catalog(args: argparse.Namespace) -> int:
    """Sync tables into a metastore: the cluster's (by the master) or one by path."""
    from memtier.catalog import (
        open_metastore,
        presto_catalog_properties,
        sync_table,
        trino_catalog_properties,
    )
    from memtier.catalog.metastore import is_hive_metastore

    console = Console()
    if args.path is not None:
        if args.tables:
            raise InvalidArgumentError("give either TABLE names (of a cluster) or --path, not both")
        if args.metastore is None:
            raise InvalidArgumentError("--path needs --metastore DIR|thrift://HOST:PORT")
        from memtier.hudi import HudiTable

        meta = HudiTable.open(args.path).meta
        results = [sync_table(meta, open_metastore(args.metastore), database=args.database or "default",
                              name=args.name).to_dict()]
    else:
        if args.name is not None:
            raise InvalidArgumentError("--name goes with --path")
        _, master = _master(args)
        try:
            tables = args.tables or master.list_tables()
            results = [master.sync_catalog(t, args.metastore, args.database) for t in tables]
        except RpcError as e:
            print(f"memtier sync-catalog: no memtier cluster answers: {e}", file=sys.stderr)
            return 2
    for result in results:
        written = f", definition written: {', '.join(result['written'])}" if result["written"] else ""
        console.step(f"{result['database']}.{' / '.join(result['tables'])}: {len(result['partitions'])} "
                     f"partitions ({result['partitions_added']} registered now){written}")
    if results:
        console.note(f"a Trino catalog file reading {results[0]['metastore']} (etc/catalog/memtier.properties):")
        print(trino_catalog_properties(results[0]["metastore"]), end="", flush=True)
        if is_hive_metastore(results[0]["metastore"]):
            console.note("a Presto catalog file reading it (etc/catalog/memtier.properties):")
            print(presto_catalog_properties(results[0]["metastore"]), end="", flush=True)
    else:
        console.step("no tables to sync")
    return 0


def _tls_init(args: argparse.Namespace) -> int:
    from memtier.certificates import make_certificates

    files = make_certificates(os.path.abspath(args.directory), args.host, days=args.days)
    console = Console()
    console.step(f"wrote {files.ca} (the CA), {files.certificate} and {files.key} (0600), valid {args.days} days")
    console.note("start a cluster with TLS:")
    print("memtier start " + " ".join(f"--config {k}={v}" for k, v in files.settings().items()), flush=True)
    console.note("and let every client check the servers against the CA:")
    print(f"export MEMTIER_CLUSTER_TLS_CA={files.ca}", flush=True)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from memtier.demo import DemoOptions

    if args.spark:
        from memtier.spark_demo import ROWS_PER_BATCH, SECONDS
        from memtier.spark_demo import run_spark_demo as run
    else:
        from memtier.demo import ROWS_PER_BATCH, SECONDS
        from memtier.demo import run_demo as run
    path = os.path.abspath(args.path or tempfile.mkdtemp(prefix="memtier-demo-"))
    options = DemoOptions(path, args.seconds or SECONDS, args.rows_per_batch or ROWS_PER_BATCH,
                          temporary=args.path is None)
    return run(options, Console())


if __name__ == "__main__":
    sys.exit(main())
