"""One name for one thing: the environment variables, config keys and Spark options that the
CLI, the client, the Spark source and the docs mention are the ones memtier/config.py and
memtier/spark/options.py declare, and only memtier/config.py reads the environment."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from memtier.cli import _parser
from memtier.config import CONFIG_CLASSES, ClusterConfig, Setting, settings
from memtier.spark.options import _SPARK_OWN, BACKFILL, BATCH_READ, COMMON, SINK, STREAM_READ

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = [spec for cls in CONFIG_CLASSES for spec, _ in settings(cls)]
KEYS = {spec.key for spec in SETTINGS}
PREFIXES = sorted({key.split(".", 1)[0] for key in KEYS})
#: Variables of the repository's tooling (tests, benchmarks, fetch scripts), not settings.
TOOLING = {"MEMTIER_BENCH_RESULTS", "MEMTIER_HUDI_SAMPLES", "MEMTIER_TRINO_JAVA", "MEMTIER_TRINO_VERSION",
           "MEMTIER_PRESTO_VERSION", "MEMTIER_HMS_JAVA", "MEMTIER_HADOOP_VERSION"}
#: Names of failpoints (memtier/failpoints.py), which share the config keys' prefixes.
NOT_CONFIG = [ROOT / "memtier" / "failpoints.py"]
SPARK_OPTIONS = BATCH_READ | STREAM_READ | SINK | BACKFILL


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def _package() -> list[Path]:
    return sorted((ROOT / "memtier").glob("**/*.py"))


def _tooling() -> list[Path]:
    return [*sorted((ROOT / "scripts").glob("**/*.sh")), *sorted((ROOT / "scripts").glob("**/*.py")),
            *sorted((ROOT / "tests").glob("**/*.py")), *sorted((ROOT / "bench").glob("**/*.py"))]


def _mentions(pattern: re.Pattern[str], paths: list[Path]) -> Iterator[tuple[str, str]]:
    """``(where, match)`` for every match of ``pattern`` in ``paths``."""
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in pattern.finditer(line):
                yield f"{path.relative_to(ROOT)}:{number}", match.group(1)


def _setting(cls: type, key: str) -> Setting:
    return next(spec for spec, _ in settings(cls) if spec.key == key)


def test_only_config_py_reads_the_environment() -> None:
    """Setting a variable for a child process (``os.environ[name] = value``) is no read."""
    readers = []
    for path in _package():
        if path.name == "config.py" and path.parent.name == "memtier":
            continue
        tree = ast.parse(path.read_text())
        written = {id(target.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   for target in node.targets if isinstance(target, ast.Subscript)}
        for node in ast.walk(tree):
            named = (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb")
                     and id(node) not in written
                     or isinstance(node, ast.ImportFrom) and node.module == "os"
                     and any(a.name in ("environ", "getenv", "environb") for a in node.names))
            if named:
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not readers, f"environment read outside memtier/config.py (STYLE 11): {readers}"


def test_every_memtier_variable_is_a_setting_or_an_alias_of_one() -> None:
    variables = {spec.env for spec in SETTINGS}
    aliases = {alias for spec in SETTINGS for alias in spec.env_aliases}
    pattern = re.compile(r"\b(MEMTIER_[A-Z0-9_]+)\b")
    wrong = [f"{where} {name}" for where, name in _mentions(pattern, [*_docs(), *_package()])
             if name not in variables | aliases | TOOLING]
    # The package names each variable by its one name (an alias is for users' old scripts):
    wrong += [f"{where} {name} (an alias: say {_alias_of(name)})" for where, name in _mentions(pattern, _package())
              if name in aliases and not where.startswith("memtier/config.py")]
    # Tooling variables must not look like settings:
    under_prefixes = tuple(f"MEMTIER_{p.upper()}_" for p in PREFIXES)
    wrong += [f"{where} {name}" for where, name in _mentions(pattern, _tooling())
              if name.startswith(under_prefixes) and name not in variables]
    assert not wrong, f"variables that name no setting: {wrong}"


def _alias_of(alias: str) -> str:
    return next(spec.env for spec in SETTINGS if alias in spec.env_aliases)


def test_every_config_key_named_in_docs_and_code_is_declared() -> None:
    pattern = re.compile(rf"(?<=[`\"' ])((?:{'|'.join(PREFIXES)})\.[a-z][a-z0-9-]*)(?=[`\"'=])")
    paths = [p for p in [*_docs(), *_package()] if p not in NOT_CONFIG]
    unknown = [f"{where} {key}" for where, key in _mentions(pattern, paths) if key not in KEYS]
    assert not unknown, f"config keys memtier/config.py does not declare: {unknown}"


def test_the_cluster_is_named_alike_by_the_cli_the_client_and_spark() -> None:
    address, token = _setting(ClusterConfig, "cluster.address"), _setting(ClusterConfig, "cluster.token")
    assert {"address", "token"} <= COMMON  # Spark's options: the keys' own names
    commands = next(a for a in _parser()._actions if a.dest == "command").choices  # type: ignore[union-attr]
    for name in ("status", "compact", "sync-catalog"):
        flags = {f: a for a in commands[name]._actions for f in a.option_strings}
        assert address.env in (flags["--address"].help or ""), name
        assert token.env in (flags["--token"].help or ""), name


def _memtier_options(source: str) -> Iterator[str]:
    """The option names of every ``format("memtier")`` chain in Python ``source``."""
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("option", "options") and _is_memtier_chain(node.func.value)):
            continue
        if node.func.attr == "option" and node.args and isinstance(node.args[0], ast.Constant):
            yield str(node.args[0].value)
        yield from (k.arg for k in node.keywords if k.arg is not None)


def _is_memtier_chain(node: ast.expr) -> bool:
    while isinstance(node, (ast.Call, ast.Attribute)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "memtier"):
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)


def test_spark_options_in_docs_and_code_are_the_sources_own() -> None:
    used: list[tuple[str, str]] = []
    for path in _docs():
        text = path.read_text()
        used += [(str(path.relative_to(ROOT)), o) for block in _python_blocks(text) for o in _memtier_options(block)]
        for sql in re.findall(r"USING memtier OPTIONS \(([^)]*)\)", text):
            used += [(str(path.relative_to(ROOT)), item.split()[0]) for item in sql.split(",")]
    for path in _package():
        used += [(str(path.relative_to(ROOT)), o) for o in _memtier_options(path.read_text())]
    assert used, "found no format(\"memtier\") option at all: the check lost its way"
    unknown = [f"{where} {name}" for where, name in used if name.lower() not in SPARK_OPTIONS | _SPARK_OWN]
    assert not unknown, f"options format(\"memtier\") does not take: {unknown}"


def test_every_spark_option_is_documented() -> None:
    spark_page = (ROOT / "docs" / "spark.md").read_text()
    undocumented = sorted(o for o in SPARK_OPTIONS if f"`{o}`" not in spark_page)
    assert not undocumented, f"format(\"memtier\") options docs/spark.md does not name: {undocumented}"
