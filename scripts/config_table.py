"""Print every memtier setting as a Markdown table (key, default, environment variable,
meaning), generated from the declarations in memtier.config; docs/configuration.md pastes the output.

    .venv/bin/python scripts/config_table.py
"""

from __future__ import annotations

import enum
from datetime import timedelta
from typing import Any

from memtier.config import CONFIG_CLASSES, Setting, parse_size, settings

_DURATION_UNITS = (("d", timedelta(days=1)), ("h", timedelta(hours=1)), ("m", timedelta(minutes=1)),
                   ("s", timedelta(seconds=1)), ("ms", timedelta(milliseconds=1)),
                   ("us", timedelta(microseconds=1)))


def _duration(value: timedelta) -> str:
    """The largest unit that writes ``value`` as a whole number: ``7d``, ``500ms``."""
    return next(f"{value // unit}{name}" for name, unit in _DURATION_UNITS if value % unit == timedelta(0))


def _size(value: int) -> str:
    """The largest binary unit that writes ``value`` as a whole number: ``1GiB``, ``64MiB``."""
    for name, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value % factor == 0:
            return f"{value // factor}{name}"
    return str(value)


def default_text(spec: Setting, value: Any) -> str:
    """The default as a user would write it; checked to parse back to the default."""
    if value is None:
        return "(none)"
    if isinstance(value, enum.Enum):
        text = value.value
    elif isinstance(value, timedelta):
        text = _duration(value)
    elif spec.parse is parse_size:
        text = _size(value)
    elif isinstance(value, bool):
        text = str(value).lower()
    else:
        text = str(value)
    if spec.parse(text) != value:
        raise AssertionError(f"{spec.key}: {text!r} does not parse back to {value!r}")
    return text


def table() -> str:
    lines = ["| key | default | environment variable | meaning |", "|---|---|---|---|"]
    for cls in CONFIG_CLASSES:
        for spec, value in settings(cls):
            env = " or ".join(f"`{name}`" for name in (spec.env, *spec.env_aliases))
            lines.append(f"| `{spec.key}` | `{default_text(spec, value)}` | {env} | {spec.doc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
