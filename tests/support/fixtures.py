"""Small fixtures every tier uses."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from memtier.io import FileIO, open_fileio


@pytest.fixture
def memory_root() -> Iterator[str]:
    """A fresh, private ``memory://`` directory, removed afterwards."""
    root = f"memory://test-{uuid.uuid4().hex}"
    yield root
    open_fileio(root).delete_dir(root)


@pytest.fixture(params=["local", "memory"])
def any_root(request: pytest.FixtureRequest, tmp_path, memory_root: str) -> str:
    """The same test on local disk and on ``memory://``."""
    return str(tmp_path / "root") if request.param == "local" else memory_root


@pytest.fixture
def fileio(any_root: str) -> FileIO:
    return open_fileio(any_root)
