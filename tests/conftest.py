"""Shared test wiring: fixtures live in tests/support and are loaded as plugins."""

pytest_plugins = [
    "tests.support.fixtures", "tests.support.seaweedfs", "tests.support.trino", "tests.support.hudi_spark",
    "tests.support.hdfs", "tests.support.tls",
    "tests.support.hms", "tests.support.presto",
]
