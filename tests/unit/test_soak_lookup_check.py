"""The soak's verdict on a lookup: stale only when it misses a write acknowledged before
it began, whatever the writes that overlapped it did (found by a soak that counted a
lookup overlapping a delete and the key's next write as stale)."""

from __future__ import annotations

from bench.soak import stale_lookup

#: (what, ordering value, began, acknowledged), in acknowledgement order
HISTORY = [("upsert", 853, 92.28, 92.30), ("delete", 855, 92.55, 92.63), ("upsert", 858, 92.69, 92.72)]


def test_absent_is_right_while_a_delete_overlaps_the_lookup() -> None:
    assert not stale_lookup([], HISTORY, began=92.40, ended=92.77, deleting=False)
    assert not stale_lookup([], HISTORY[:1], began=92.40, ended=92.77, deleting=True)


def test_absent_or_older_is_stale_after_an_acknowledged_upsert() -> None:
    assert stale_lookup([], HISTORY[:1], began=92.40, ended=92.77, deleting=False)
    assert stale_lookup([850], HISTORY, began=92.40, ended=92.77, deleting=False)


def test_after_an_acknowledged_delete_only_absent_or_a_newer_write_is_right() -> None:
    assert not stale_lookup([], HISTORY, began=92.65, ended=92.80, deleting=False)
    assert not stale_lookup([858], HISTORY, began=92.65, ended=92.80, deleting=False)
    assert stale_lookup([853], HISTORY, began=92.65, ended=92.80, deleting=False)


def test_a_key_with_nothing_acknowledged_before_the_lookup_is_never_stale() -> None:
    assert not stale_lookup([], HISTORY, began=92.0, ended=92.1, deleting=False)
