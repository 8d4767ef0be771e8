"""WalConfig: keys, environment variables, defaults and clear errors."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memtier.config import SyncPolicy, WalConfig, load, parse_duration
from memtier.errors import InvalidArgumentError


def test_defaults_are_safe() -> None:
    config = load(WalConfig, {}, environ={})
    assert config == WalConfig()
    assert config.sync_policy is SyncPolicy.EVERY_APPEND
    assert config.retention == timedelta(days=7)
    assert config.retention_bytes == 1 << 30  # a week of flushed WAL must not fill the disk


def test_options_override_environment() -> None:
    environ = {"MEMTIER_WAL_SYNC_POLICY": "interval", "MEMTIER_WAL_RETENTION": "2d"}
    config = load(
        WalConfig, {"wal.sync-policy": "group-window", "wal.group-window": "500us"}, environ
    )
    assert config.sync_policy is SyncPolicy.GROUP_WINDOW
    assert config.group_window == timedelta(microseconds=500)
    assert config.retention == timedelta(days=2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("250us", timedelta(microseconds=250)),
        ("2ms", timedelta(milliseconds=2)),
        ("1.5s", timedelta(seconds=1.5)),
        ("10m", timedelta(minutes=10)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        (" 3 s ", timedelta(seconds=3)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "5", "5 weeks", "-1s", "ms"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_bad_value_names_key_and_variable() -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"wal\.sync-policy.*MEMTIER_WAL_SYNC_POLICY.*'always'"
    ):
        load(WalConfig, {"wal.sync-policy": "always"}, environ={})
    with pytest.raises(InvalidArgumentError, match=r"wal\.retention \(env MEMTIER_WAL_RETENTION\)"):
        load(WalConfig, {}, environ={"MEMTIER_WAL_RETENTION": "forever"})


def test_unknown_key_under_the_prefix_is_an_error() -> None:
    with pytest.raises(InvalidArgumentError, match=r"unknown config key\(s\) \['wal\.retension'\]"):
        load(WalConfig, {"wal.retension": "1d"}, environ={})
    assert load(WalConfig, {"table.other": "x"}, environ={}) == WalConfig()


def test_invalid_values_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="retention must not be negative"):
        WalConfig(retention=timedelta(seconds=-1))
    with pytest.raises(InvalidArgumentError, match="retention_bytes and reserved_bytes must not be negative"):
        WalConfig(retention_bytes=-1)
    assert load(WalConfig, {"wal.retention-bytes": "256MiB"}, environ={}).retention_bytes == 256 << 20
    with pytest.raises(InvalidArgumentError, match="sync_interval must be positive"):
        WalConfig(sync_policy=SyncPolicy.INTERVAL, sync_interval=timedelta(0))
