"""The ``memtier`` command: usage errors, ``status`` with nothing to talk to. (The demo end
to end, as a user runs it: tests/integration/test_demo_script.py.)"""

from __future__ import annotations

import socket

import pytest

from memtier.cli import main


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_status_with_nothing_at_the_address_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    address = f"grpc://127.0.0.1:{_unused_port()}"
    assert main(["status", "--address", address]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("memtier status: no memtier cluster answers") and address in err


def test_status_without_an_address_says_where_to_get_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMTIER_CLUSTER_ADDRESS", raising=False)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--address" in err and "MEMTIER_CLUSTER_ADDRESS" in err


@pytest.mark.parametrize("argv", [
    [],
    ["launch"],
    ["demo", "--seconds", "soon"],
    ["demo", "--seconds", "0"],
    ["demo", "--rows-per-batch", "-5"],
    ["demo", "--spark", "--seconds", "0"],
    ["start", "--table-servers", "0"],
    ["start", "--config", "no-equals-sign"],
    ["status", "--timeout", "-1"],
])
def test_argument_errors_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "usage: memtier" in err and "error:" in err


@pytest.mark.parametrize("setting", ["nosuch.key=1", "wal.no-such-key=1", "tableserver.memory-budget=lots"])
def test_bad_settings_are_refused_before_anything_starts(setting: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["start", "--config", setting]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memtier start: error:") and setting.split("=")[0] in err


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(command in out for command in ("start", "status", "demo"))
