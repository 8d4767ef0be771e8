"""The configuration table of docs/configuration.md is the one generated from memtier/config.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_list_every_setting_as_config_py_declares_it() -> None:
    spec = importlib.util.spec_from_file_location("config_table", ROOT / "scripts" / "config_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.table() in (ROOT / "docs" / "configuration.md").read_text(), (
        "docs/configuration.md's configuration table differs from memtier/config.py: "
        "regenerate it with .venv/bin/python scripts/config_table.py"
    )
