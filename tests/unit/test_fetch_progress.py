"""scripts/progress.py reads pip's, mvn's and apt-get's logs into one progress line: files
and bytes downloaded, the file on its way, what the command does between downloads; and a
command that fails hands its exit code and its last lines on."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def progress() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scripts_progress", ROOT / "scripts" / "progress.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _fed(progress: ModuleType, lines: list[str]) -> object:
    state = progress.Progress()
    for line in lines:
        state.feed(line)
    return state


def test_pip_downloads_with_and_without_progress_and_the_cache(progress: ModuleType) -> None:
    state = _fed(progress, [
        "Collecting hudi",
        "  Downloading hudi-0.5.0-cp310-abi3-manylinux_2_17_x86_64.whl (45.5 MB)",
        "Progress 0 of 45457007",
        "Progress 262144 of 45457007",
    ])
    assert "hudi-0.5.0-cp310-abi3-manylinux_2_17_x86_64.whl 0.3 MB of 45.5 MB" in state.line(3)
    for line in ["Progress 45457007 of 45457007", "Collecting pyarrow-hotfix (from hudi)",
                 "  Downloading pyarrow_hotfix-0.7-py3-none-any.whl (7.9 kB)",  # too small for progress
                 "Collecting numpy", "  Using cached numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl (16.8 MB)",
                 "  Preparing metadata (pyproject.toml): started"]:
        state.feed(line)
    assert state.line(9) == "   9 s  2 files, 45.5 MB downloaded, 1 from the cache; numpy: preparing metadata (pyproject.toml)"
    state.feed("Installing collected packages: pyarrow-hotfix, numpy, hudi")
    assert state.line(12).endswith("; installing 3 packages")
    state.feed("Installing collected packages: hudi")
    assert state.line(13).endswith("; installing 1 package")


def test_mvn_counts_what_arrived_and_shows_the_file_on_its_way(progress: ModuleType) -> None:
    url = "https://repo.maven.apache.org/maven2/io/trino/trino-server/476/trino-server-476.tar.gz"
    state = _fed(progress, [
        "Downloading from central: https://repo.maven.apache.org/maven2/org/a/a-1.pom",
        "Progress (1): 4.1/18 kB",
        "Downloaded from central: https://repo.maven.apache.org/maven2/org/a/a-1.pom (18 kB at 33 kB/s)",
        f"Downloading from central: {url}",
        "Progress (1): 1.2/821 MB",
    ])
    assert state.line(5) == "   5 s  1 file, 18 kB downloaded; trino-server-476.tar.gz 1.2/821 MB"
    state.feed("Downloading from central: https://repo.maven.apache.org/maven2/org/b/missing-1.jar")
    state.feed("[ERROR] Failed to execute goal")  # a file that never came is not counted
    assert state.line(6).startswith("   6 s  1 file, 18 kB downloaded")


def test_apt_get_counts_each_package_it_gets(progress: ModuleType) -> None:
    state = _fed(progress, [
        "Get:1 http://deb.debian.org/debian bookworm/main amd64 java-common all 0.74 [6388 B]",
        "Get:2 http://deb.debian.org/debian bookworm/main amd64 openjdk-17-jre-headless amd64 17.0.15 [43.6 MB]",
        "Unpacking java-common (0.74) ...",
    ])
    assert state.line(2) == "   2 s  2 files, 43.6 MB downloaded; unpacking and setting up packages"


def test_a_failed_command_returns_its_code_and_shows_its_last_lines(
    progress: ModuleType, capfd: pytest.CaptureFixture[str]
) -> None:
    code = progress.run([sys.executable, "-c", "import sys; print('Progress 1 of 2'); print('the reason'); sys.exit(3)"])
    assert code == 3
    err = capfd.readouterr().err
    assert "failed (exit code 3)" in err and "| the reason" in err and "| Progress" not in err
