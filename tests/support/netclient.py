"""Client processes for the multi-host tests, run on a host (in its network namespace).

    python -m tests.support.netclient write ADDRESS TOKEN CA TABLE FIRST SECONDS [ROWS]
    python -m tests.support.netclient probe LOCATION TOKEN CA TABLE KEY[,KEY...]

``write`` writes batch FIRST, FIRST+1, ... (batch ``i``: keys ``i*ROWS ..`` at ts ``i``,
:func:`tests.support.acked.batch`) for SECONDS, each until it is acknowledged, a failed
write retried with its own sequence number (so its rows land once), and prints ``ACK i
ms`` for each (its latency, retries included), ``RETRY i error`` for each failure, and
``UNKNOWN i`` for a write still failing a minute past SECONDS, then ends.

``probe`` writes the KEYs (at ts 0) straight to the table server at LOCATION, as a client
with routes from before a move would, and prints ``ACKED`` or ``REFUSED <error class>: ...``.
"""

from __future__ import annotations

import sys
import time
import uuid

from memtier.errors import MemtierError
from tests.support.acked import batch

#: How long past its end a writer keeps retrying a write before it gives up on it.
GRACE_SECONDS = 60.0


def rows_of(i: int, rows: int) -> list[int]:
    return list(range(i * rows, (i + 1) * rows))


def write(address: str, token: str, ca: str, table: str, first: int, seconds: float, rows: int) -> None:
    import memtier

    client = memtier.connect(address, token=token, tls_ca=ca)
    end = time.monotonic() + seconds
    i = first
    while time.monotonic() < end:
        data, sequence, began = batch(rows_of(i, rows), i), None, time.monotonic()
        while True:
            try:
                client.write(table, data, sequence=sequence)
                print(f"ACK {i} {(time.monotonic() - began) * 1000:.1f}", flush=True)
                break
            except MemtierError as e:
                sequence = getattr(e, "sequence", sequence)
                print(f"RETRY {i} {type(e).__name__}: {str(e)[:200]}", flush=True)
                if time.monotonic() > end + GRACE_SECONDS:
                    print(f"UNKNOWN {i}", flush=True)
                    return
        i += 1


def probe(location: str, token: str, ca: str, table: str, keys: str) -> None:
    from memtier.tableserver.service import TableServerProxy

    server = TableServerProxy(location, token=token, tls_ca=ca, timeout=20)
    try:
        server.write(table, batch([int(k) for k in keys.split(",")], 0), producer_id=uuid.uuid4().bytes,
                     producer_seq=1)
    except MemtierError as e:
        print(f"REFUSED {type(e).__name__}: {e}", flush=True)
        return
    print("ACKED", flush=True)


def main() -> None:
    command, *args = sys.argv[1:]
    if command == "write":
        address, token, ca, table, first, seconds, *rows = args
        write(address, token, ca, table, int(first), float(seconds), int(rows[0]) if rows else 100)
    elif command == "probe":
        probe(*args)
    else:
        raise SystemExit(f"unknown command {command!r}: write or probe")


if __name__ == "__main__":
    main()
