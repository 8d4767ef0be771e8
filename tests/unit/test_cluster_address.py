"""The cluster's address is one setting, ``cluster.address``: ``$MEMTIER_CLUSTER_ADDRESS``
(``$MEMTIER_ADDRESS``, its older name, still read), which ``memtier start`` tells users to
export and the CLI, ``memtier.connect()`` and Spark's ``format("memtier")`` all read."""

from __future__ import annotations

import pytest

from memtier.config import ClusterConfig, load
from memtier.errors import InvalidArgumentError
from memtier.spark.options import SINK, SourceOptions

ADDRESS = "grpc://127.0.0.1:40001"


def test_the_older_name_is_read_when_the_variable_is_not_set() -> None:
    assert load(ClusterConfig, environ={"MEMTIER_ADDRESS": ADDRESS}).address == ADDRESS
    both = {"MEMTIER_CLUSTER_ADDRESS": ADDRESS, "MEMTIER_ADDRESS": "grpc://127.0.0.1:1"}
    assert load(ClusterConfig, environ=both).address == ADDRESS


def test_a_bad_value_names_the_variable_it_came_from() -> None:
    with pytest.raises(InvalidArgumentError, match=r"cluster\.heartbeat-timeout \(env MEMTIER_CLUSTER_HEARTBEAT_TIMEOUT\)"):
        load(ClusterConfig, environ={"MEMTIER_CLUSTER_HEARTBEAT_TIMEOUT": "soon"})


@pytest.mark.parametrize("variable", ["MEMTIER_CLUSTER_ADDRESS", "MEMTIER_ADDRESS"])
def test_spark_finds_the_cluster_memtier_start_told_the_shell_about(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMTIER_CLUSTER_ADDRESS", raising=False)
    monkeypatch.delenv("MEMTIER_ADDRESS", raising=False)
    monkeypatch.setenv(variable, ADDRESS)
    monkeypatch.setenv("MEMTIER_CLUSTER_TOKEN", "secret")
    options = SourceOptions.parse({"table": "t"}, SINK, "stream write")
    assert (options.address, options.token) == (ADDRESS, "secret")


def test_an_option_or_the_registered_cluster_goes_before_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMTIER_CLUSTER_ADDRESS", ADDRESS)
    registered = SourceOptions.parse({"table": "t"}, SINK, "stream write", "grpc://127.0.0.1:2", "tok")
    assert (registered.address, registered.token) == ("grpc://127.0.0.1:2", "tok")
    given = SourceOptions.parse({"table": "t", "Address": "grpc://127.0.0.1:3"}, SINK, "stream write",
                                "grpc://127.0.0.1:2", "tok")
    assert (given.address, given.token) == ("grpc://127.0.0.1:3", None)


def test_no_cluster_anywhere_is_an_error_that_says_where_to_name_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMTIER_CLUSTER_ADDRESS", raising=False)
    monkeypatch.delenv("MEMTIER_ADDRESS", raising=False)
    with pytest.raises(InvalidArgumentError, match=r'option "address".*MEMTIER_CLUSTER_ADDRESS'):
        SourceOptions.parse({"table": "t"}, SINK, "stream write")
