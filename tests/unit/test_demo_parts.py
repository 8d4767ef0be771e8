"""The demo's own logic, without a cluster: how many table servers it starts, which
acknowledged rows the freshness reader probes, and the writer's pacing."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pyarrow as pa

from memtier.demo import AckBoard, StreamStats, Upserts, _write_loop, table_servers_for


def test_one_table_server_per_two_cores_at_least_one_at_most_two() -> None:
    assert [table_servers_for(n) for n in (1, 2, 3, 4, 8, 64)] == [1, 1, 1, 2, 2, 2]


def test_the_reader_gets_an_ack_posted_after_it_asked_never_one_that_aged_meanwhile() -> None:
    board = AckBoard()
    board.post(key=1, ts=10)  # came while the reader was busy: not handed out
    assert board.next_ack(timeout=0.01) is None
    later = threading.Timer(0.05, board.post, kwargs={"key": 2, "ts": 20})
    later.start()
    ack = board.next_ack(timeout=5)
    later.join()
    assert ack is not None and (ack.key, ack.ts, ack.number) == (2, 20, 2)


@dataclass
class _Written:
    rows: int
    seconds: float = 0.0


class _RecordingClient:
    """Stands in for the client: keeps when each write came."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def write(self, table: str, batch: pa.Table) -> _Written:
        self.times.append(time.monotonic())
        return _Written(batch.num_rows)


def test_a_paced_writer_sends_batch_n_no_sooner_than_n_batches_of_the_rate_after_its_start() -> None:
    client, stats = _RecordingClient(), StreamStats()
    started = time.monotonic()
    _write_loop(client, "t", Upserts(100), AckBoard(), stats, started + 0.5, 2_000.0,  # type: ignore[arg-type]
                threading.Event())
    assert 5 <= len(client.times) <= 12  # 20 batches/s for 0.5 s, give or take the last
    assert stats.rows == 100 * len(client.times)
    assert all(t - started >= n * 0.05 for n, t in enumerate(client.times))
