"""Failpoints: armed once, refused when unknown, and not taken over RPC unless a table
server's ``tableserver.failpoints`` is on."""

from __future__ import annotations

import pytest

from memtier import failpoints
from memtier.config import TableServerConfig
from memtier.errors import InvalidArgumentError
from memtier.tableserver.server import TableServer
from memtier.tableserver.service import TableServerService


def test_an_armed_point_fires_once() -> None:
    fired: list[str] = []
    failpoints.arm(failpoints.BEFORE_ACK, lambda: fired.append("ack"))
    failpoints.hit(failpoints.BEFORE_SYNC)  # another point: nothing
    failpoints.hit(failpoints.BEFORE_ACK)
    failpoints.hit(failpoints.BEFORE_ACK)
    assert fired == ["ack"]


def test_unknown_points_and_actions_are_refused_naming_them() -> None:
    with pytest.raises(InvalidArgumentError, match="no failpoint 'nowhere'.*write.before-ack"):
        failpoints.arm("nowhere", "stop")
    with pytest.raises(InvalidArgumentError, match="'crash'"):
        failpoints.arm(failpoints.BEFORE_ACK, "crash")


@pytest.mark.parametrize("on", [False, True])
def test_a_table_server_takes_failpoints_over_rpc_only_when_told_to(tmp_path, on: bool) -> None:
    server = TableServer("ts-x", None, str(tmp_path), config=TableServerConfig(failpoints=on))  # type: ignore[arg-type]
    service = TableServerService(server)
    try:
        if not on:
            with pytest.raises(InvalidArgumentError, match=r"failpoints are off.*tableserver\.failpoints"):
                service.handle_action("arm_failpoint", {"point": failpoints.BEFORE_ACK})
        else:
            service.handle_action("arm_failpoint", {"point": failpoints.BEFORE_ACK})
            assert failpoints._armed.pop(failpoints.BEFORE_ACK) is failpoints.stop_process
    finally:
        server.close()
