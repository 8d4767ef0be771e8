"""File names are value types: ``X.parse(x.name) == x`` and ``X.parse(n).name == n``."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from memtier.hudi.filenames import BaseFile, LogFile, WriteToken, bucket_file_id, classify

_uuid_ids = st.uuids().map(lambda u: f"{u}-{0}")
_split_ids = st.tuples(st.uuids(), st.integers(0, 99)).map(lambda t: f"{t[0]}-{t[1]}")
_bucket_ids = st.integers(0, 99_999_999).map(bucket_file_id)
_free_ids = st.text(string.ascii_letters + string.digits + "-", min_size=1, max_size=40)
file_ids = st.one_of(_uuid_ids, _split_ids, _bucket_ids, _free_ids)
instants = st.one_of(
    st.from_regex(r"\A[0-9]{17}\Z"), st.from_regex(r"\A[0-9]{14}\Z"), st.from_regex(r"\A[0-9]{1,25}\Z")
)
tokens = st.builds(
    WriteToken, st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**9)
).map(str)
base_files = st.builds(
    BaseFile, file_ids, tokens, instants, st.sampled_from(["parquet", "orc", "hfile", "lance"])
)


@st.composite
def log_files(draw: st.DrawFn) -> LogFile:
    token = draw(st.none() | tokens)
    return LogFile(
        draw(file_ids),
        draw(instants),
        draw(st.integers(0, 10**6)),
        token,
        draw(st.sampled_from(["log", "archive"])),
        token is not None and draw(st.booleans()),
    )


@given(base_files)
def test_base_file_round_trips(base: BaseFile) -> None:
    assert BaseFile.parse(base.name) == base
    assert BaseFile.parse(base.name).name == base.name
    assert classify(base.name) == base


@given(log_files())
def test_log_file_round_trips(log: LogFile) -> None:
    assert LogFile.parse(log.name) == log
    assert LogFile.parse(log.name).name == log.name
    assert classify(log.name) == log


@given(base_files, log_files())
def test_base_and_log_names_never_collide(base: BaseFile, log: LogFile) -> None:
    assert not isinstance(classify(base.name), LogFile)
    assert not isinstance(classify(log.name), BaseFile)


@given(st.text(max_size=80))
def test_whatever_classifies_round_trips(name: str) -> None:
    parsed = classify(name)
    assert parsed is None or parsed.name == name


@given(st.lists(log_files(), min_size=2, max_size=8))
def test_log_order_is_by_base_instant_then_version(logs: list[LogFile]) -> None:
    ordered = sorted(logs, key=LogFile.sort_key)
    keys = [(f.base_instant, f.version) for f in ordered]
    assert keys == sorted(keys)
