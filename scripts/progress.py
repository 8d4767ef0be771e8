"""Run a fetch (pip, mvn or apt-get) and show its progress as one line instead of its log.

    python3 scripts/progress.py COMMAND [ARG ...]

The line counts the files downloaded (and taken from a cache) and their size, and shows
the file on its way with how much of it has come: rewritten in place on a terminal,
printed every ten seconds otherwise. On failure the command's last lines are printed and
its exit code returned. Feed pip ``--progress-bar raw`` and run mvn without ``-q``/``-B``
(its console transfer listener prints each file's progress).
Standard library only: it runs before any virtual environment exists.
"""

from __future__ import annotations

import collections
import os
import re
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024, "mib": 1024**2, "gib": 1024**3}
_SIZE = r"([\d.]+)\s*([kKMG]i?B|B)"
_PIP_DOWNLOAD = re.compile(rf"^\s*Downloading (\S+) \({_SIZE}\)")
_PIP_CACHED = re.compile(rf"^\s*Using cached (\S+) \({_SIZE}\)")
_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")
_PIP_COLLECTING = re.compile(r"^Collecting ([A-Za-z0-9_.\-]+)")
_PIP_STEP = re.compile(r"^\s*(.+?): started$")
_PIP_INSTALLING = re.compile(r"^Installing collected packages: (.*)")
_MVN_DOWNLOADING = re.compile(r"^Downloading from \S+: (\S+)")
_MVN_DOWNLOADED = re.compile(rf"^Downloaded from \S+: (\S+) \({_SIZE}")
_MVN_PROGRESS = re.compile(r"^Progress \(\d+\): (.+?)\s*$")
_APT_GET = re.compile(rf"^Get:\d+ \S+ \S+ \S+ (\S+) .* \[{_SIZE}\]")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: A plain (not terminal) log gets a progress line this often; a terminal's is redrawn at most this often.
PLAIN_EVERY = 10.0
TTY_EVERY = 0.1
TAIL_LINES = 40


def size_bytes(number: str, unit: str) -> float:
    """``("70.1", "MB")`` -> 70100000.0 (pip, mvn and apt count in powers of 1000)."""
    return float(number) * _UNITS[unit.lower()]


def human(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


@dataclass
class Progress:
    """What a fetch's log has said so far."""

    files: int = 0
    downloaded: float = 0.0
    cached: int = 0
    current: str = ""  # the file on its way, and how much of it has come
    phase: str = ""  # what the command does when it is not downloading
    _file: str = ""  # the file on its way
    _size: float = 0.0  # ... and its size, counted once it has come
    _package: str = ""  # the package pip collects

    def feed(self, line: str) -> None:
        """Take one line (or ``\\r``-separated fragment) of the command's output."""
        if m := _PIP_PROGRESS.match(line):
            done, total = int(m[1]), int(m[2])
            self.current = f"{self._file} {human(done)} of {human(total)}"
            if done >= total:
                self._arrived()
            return
        if m := _MVN_PROGRESS.match(line):
            self.current = f"{self._file} {m[1]}"
            return
        if self._size:  # a file pip shows no progress of (a small one) has come by its next line
            self._arrived()
        if m := _PIP_DOWNLOAD.match(line):
            self._start(m[1], size_bytes(m[2], m[3]), f"({m[2]} {m[3]})")
        elif _PIP_CACHED.match(line):
            self.cached += 1
        elif m := _PIP_COLLECTING.match(line):
            self._package, self.phase = m[1], f"resolving {m[1]}"
        elif m := _PIP_STEP.match(line):
            self.phase = f"{self._package}: {m[1][0].lower()}{m[1][1:]}"
        elif m := _PIP_INSTALLING.match(line):
            self.phase = f"installing {_count(len(m[1].split(',')), 'package')}"
        elif m := _MVN_DOWNLOADING.match(line):
            self._start(m[1], 0.0, "")
        elif m := _MVN_DOWNLOADED.match(line):
            self._file, self._size = _short(m[1]), size_bytes(m[2], m[3])
            self._arrived()
        elif m := _APT_GET.match(line):
            self._start(m[1], size_bytes(m[2], m[3]), f"({m[2]} {m[3]})")
            self._arrived()
        elif line.startswith(("Unpacking ", "Setting up ")):
            self.phase = "unpacking and setting up packages"

    def _start(self, url: str, size: float, text: str) -> None:
        self._file, self._size = _short(url), size
        self.current = f"{self._file} {text}".rstrip()

    def _arrived(self) -> None:
        """The file on its way has come (mvn's and apt's say so; pip's by their size)."""
        if self._file:
            self.files, self.downloaded = self.files + 1, self.downloaded + self._size
            self._file, self._size, self.current = "", 0.0, ""

    def line(self, seconds: float) -> str:
        text = f"{seconds:4.0f} s  {_count(self.files, 'file')}, {human(self.downloaded)} downloaded"
        if self.cached:
            text += f", {self.cached} from the cache"
        now = self.current or self.phase
        return f"{text}; {now}" if now else text


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def _short(url: str) -> str:
    """A file's name from its URL or path."""
    return url.rstrip("/").rsplit("/", 1)[-1]


class Display:
    """The progress line: in place on a terminal, else a plain line now and then."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.started = time.monotonic()
        self._shown = ""  # the plain line printed last
        self._plain_at = self.started  # when a line was last written

    def show(self, progress: Progress, final: bool = False) -> None:
        now = time.monotonic()
        text = "    " + progress.line(now - self.started)
        if self.tty and (final or now - self._plain_at >= TTY_EVERY):
            self._plain_at = now
            width = shutil.get_terminal_size().columns - 1
            sys.stdout.write("\r" + text[:width] + "\033[K" + ("\n" if final else ""))
        elif not self.tty and (final or (now - self._plain_at >= PLAIN_EVERY and text != self._shown)):
            self._plain_at = now
            sys.stdout.write(text + "\n")
            self._shown = text
        sys.stdout.flush()


def run(command: list[str]) -> int:
    """Run ``command``, showing its progress; its exit code."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    progress, display = Progress(), Display()
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    pending = b""
    fd = process.stdout.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        chunk = os.read(fd, 65536) if ready else b""
        if ready and not chunk:
            break
        *parts, pending = re.split(rb"[\r\n]", pending + chunk)
        for part in parts:
            text = _ANSI.sub("", part.decode(errors="replace"))
            if text.strip():
                progress.feed(text)
                if not text.startswith("Progress "):
                    tail.append(text)
        display.show(progress)
    if pending:
        tail.append(pending.decode(errors="replace"))
    code = process.wait()
    progress.current, progress.phase = "", "done" if code == 0 else "failed"
    display.show(progress, final=True)
    if code != 0:
        print(f"    failed (exit code {code}): {' '.join(command)}", file=sys.stderr)
        print("\n".join("    | " + line for line in tail), file=sys.stderr)
    return code


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(run(sys.argv[1:]))
