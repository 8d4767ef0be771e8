"""Checks of documentation code blocks that need neither a cluster nor a JVM: command lines
against the scripts and the CLI's parser, config keys against memtier/config.py, catalog
files against the functions that write them, and the static check of Python blocks that
cannot run here. Each function returns the problems it found, as text naming them."""

from __future__ import annotations

import ast
import inspect
import re
import shlex
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memtier.catalog.presto import presto_catalog_properties
from memtier.catalog.trino import trino_catalog_properties
from memtier.cli import _parser
from memtier.config import CONFIG_CLASSES, TableOptions, check, load, settings
from tests.support.docblocks import ROOT

KEYS = {spec.key for cls in CONFIG_CLASSES for spec, _ in settings(cls)}
TABLE_KEYS = {spec.key for spec, _ in settings(TableOptions)}
ENV = {spec.env for cls in CONFIG_CLASSES for spec, _ in settings(cls)}
#: Commands a bash block may hold that the test only checks (too heavy to run in a test):
#: they set up venvs, fetch servers, run the suite, or run until Ctrl-C.
SCRIPTS = ("scripts/demo.sh", "scripts/test.sh", "scripts/setup.sh", "scripts/hdfs.sh")
MEMTIER = ("memtier", ".venv/bin/memtier")
PYTHON = (".venv/bin/python",)


# -- command lines -------------------------------------------------------------------------

def command_lines(code: str) -> Iterator[list[str]]:
    """Each command of a bash block as argv: continuations joined, comments dropped, and
    ``$(...)`` / ``$PWD`` replaced by a word (the test runs none of them as a shell would)."""
    text = code.replace("\\\n", " ")
    for line in text.splitlines():
        line = re.sub(r"\$\([^)]*\)", "SUBSTITUTED", line).replace("$PWD", "/tmp")
        argv = shlex.split(line, comments=True)
        if argv:
            yield argv


def check_command(argv: list[str], workdir: Path) -> list[str]:
    """Problems of one command line; ``memtier tls-init`` is run for real (in ``workdir``)."""
    name = argv[0]
    if name in MEMTIER:
        return _check_memtier(argv[1:], workdir)
    if name in SCRIPTS:
        return _check_script(name, argv[1:])
    if name in PYTHON:
        return _check_bench(argv[1:])
    if name == "export":
        variable = argv[1].split("=", 1)[0]
        return [] if variable in ENV else [f"export of {variable}, which names no memtier setting"]
    return [f"the doc test does not know how to check the command {name!r}"]


def _parse_memtier(args: list[str]) -> tuple[Any, list[str]]:
    try:
        return _parser().parse_args(args), []
    except SystemExit:
        return None, [f"memtier {' '.join(args)}: the CLI's parser refuses it"]


def _check_memtier(args: list[str], workdir: Path) -> list[str]:
    parsed, problems = _parse_memtier(args)
    if parsed is None:
        return problems
    problems += _config_problems(dict(getattr(parsed, "config", [])))
    for key, value in getattr(parsed, "option", []):
        try:
            load(TableOptions, {key: value})
        except Exception as e:  # noqa: BLE001 - reported as the block's problem
            problems.append(f"memtier {args[0]} --option {key}={value}: {e}")
        if key not in TABLE_KEYS:
            problems.append(f"--option {key}: not a table option ({sorted(TABLE_KEYS)})")
    if parsed.command == "tls-init":
        run = subprocess.run([sys.executable, "-m", "memtier.cli", *args], cwd=workdir,
                             capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            problems.append(f"memtier {' '.join(args)} failed ({run.returncode}): {run.stderr.strip()}")
    return problems


def _config_problems(options: dict[str, str | None]) -> list[str]:
    """Undeclared keys, and values that do not parse together (a value left None is not
    known here; a file a value names need not exist: it is one of the reader's machine)."""
    unknown = sorted(set(options) - KEYS)
    if unknown:
        return [f"config keys memtier/config.py does not declare: {unknown}"]
    try:
        check({key: value for key, value in options.items() if value is not None})
    except Exception as e:  # noqa: BLE001 - reported as the block's problem
        if "no such file" not in str(e):
            return [f"config {options}: {e}"]
    return []


def _check_script(script: str, args: list[str]) -> list[str]:
    path = ROOT / script
    if not path.is_file() or not path.stat().st_mode & 0o111:
        return [f"{script} is not an executable script"]
    if script == "scripts/demo.sh":  # its arguments go to `memtier demo`
        return _parse_memtier(["demo", *args])[1]
    if script == "scripts/test.sh":  # ... to pytest
        return _check_pytest_args(args)
    text = path.read_text()
    return [f"{script} {arg}: the script does not name {arg!r}" for arg in args if arg not in text]


def _check_pytest_args(args: list[str]) -> list[str]:
    markers = {m.split(":", 1)[0] for m in tomllib.loads((ROOT / "pyproject.toml").read_text())
               ["tool"]["pytest"]["ini_options"]["markers"]}
    problems = []
    it = iter(args)
    for arg in it:
        if arg == "-m":
            words = set(re.findall(r"\w+", next(it, ""))) - {"not", "and", "or"}
            problems += [f"pytest marker {w!r} is not declared in pyproject.toml" for w in words - markers]
        elif not arg.startswith("-") and not (ROOT / arg.split("::")[0]).exists():
            problems.append(f"scripts/test.sh {arg}: no such test path")
    return problems


def _check_bench(args: list[str]) -> list[str]:
    if args[:1] == ["-m"]:
        module, rest = args[1], args[2:]
        path = ROOT / (module.replace(".", "/") + ".py")
    else:
        module, rest = args[0], args[1:]
        path = ROOT / module
    if not path.is_file():
        return [f"python {module}: no such module or file"]
    source = path.read_text()
    return [f"python {module} {flag}: the program takes no {flag}" for flag in rest
            if flag.startswith("--") and f'"{flag}"' not in source]


def check_synopsis(code: str) -> list[str]:
    """Usage lines (``memtier CMD[|CMD] [--flag ...]``): each command and flag exists."""
    commands = next(a for a in _parser()._actions if a.dest == "command").choices  # type: ignore[union-attr]
    problems = []
    for line in code.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] not in MEMTIER:
            problems.append(f"a synopsis line that is not a memtier command: {line!r}")
            continue
        for name in words[1].split("|"):
            if name not in commands:
                problems.append(f"memtier {name}: no such command")
                continue
            flags = {f for a in commands[name]._actions for f in a.option_strings}
            problems += [f"memtier {name} {flag}: no such flag" for flag in re.findall(r"(?<![\w-])--[a-z-]+", line)
                         if flag not in flags]
            problems += [p for key in re.findall(r"--config ([a-z]+\.[a-z.-]+)=", line) for p in _config_problems({key: None})]
    return problems


# -- output and transcripts ----------------------------------------------------------------

def _package_text() -> str:
    """Every string literal of the package, the literal parts of f-strings (implicitly
    concatenated pieces joined, as Python joins them), one a line."""
    texts = [node.value for path in sorted((ROOT / "memtier").glob("**/*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return "\n".join(texts)


def check_output(code: str, workdir: Path) -> list[str]:
    """A transcript: ``$ `` lines are commands (checked as in bash blocks); every other line
    is what memtier printed: each of its phrases (a run of 12 or more characters of words,
    table columns apart) must have 12 characters in a row that appear in the package's
    source (the rest may be a value), so a reworded message fails the test."""
    problems = []
    source = _package_text()
    for line in code.splitlines():
        if line.startswith("$ "):
            for argv in command_lines(line[2:]):
                problems += check_command(argv, workdir) if argv[0] != "memtier" or argv[1:2] != ["tls-init"] \
                    else _parse_memtier(argv[1:])[1]
            continue
        values = re.sub(r"\S*(://|/)\S*", "  ", line)  # addresses and paths: values, not text
        for segment in re.split(r"\s{2,}|[;,] ", values):
            for phrase in re.findall(r"[A-Za-z][A-Za-z ,'()-]{11,}", segment):
                words = phrase.split(" ")  # its first and last word may be a value's ("4.3 ms", "(p50")
                if not any(_covered(" ".join(words[a:len(words) - b]), source) for a in (0, 1) for b in (0, 1)):
                    problems.append(f"output phrase not in memtier's source: {phrase!r}")
    return problems


def _covered(phrase: str, source: str, width: int = 10) -> bool:
    """Whether every character of ``phrase`` lies in a ``width``-character piece of it that
    ``source`` holds (a phrase with a value inside it, as an f-string prints it, passes;
    a reworded one does not)."""
    covered = [False] * len(phrase)
    for i in range(len(phrase) - width + 1):
        if phrase[i:i + width] in source:
            covered[i:i + width] = [True] * width
    return all(covered)


# -- catalog files, XML, SQL ---------------------------------------------------------------

def check_properties(code: str) -> list[str]:
    """A catalog file: with a ``connector.name``, exactly what memtier writes for its
    metastore (comment lines before it aside); without, well-formed ``key=value`` lines."""
    lines = [ln for ln in code.splitlines() if ln.strip()]
    malformed = [ln for ln in lines if not ln.startswith("#") and "=" not in ln]
    if malformed:
        return [f"not key=value: {malformed}"]
    values = dict(ln.split("=", 1) for ln in lines if not ln.startswith("#"))
    if "connector.name" not in values:
        return []
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    body = "\n".join(lines) + "\n"
    metastore = values.get("hive.metastore.uri") or values.get("hive.metastore.catalog.dir", "").removeprefix("local://")
    written = [trino_catalog_properties(metastore)]
    if metastore.startswith("thrift://"):
        written += [presto_catalog_properties(metastore, c) for c in ("hudi", "hive-hadoop2")]
    if body not in written:
        return [f"a catalog file memtier does not write for {metastore}: {body!r}; it writes {written}"]
    return []


def check_xml(code: str) -> list[str]:
    try:
        ET.fromstring(code)
    except ET.ParseError as e:
        return [f"XML does not parse: {e}"]
    return []


def check_sql(code: str, tables: set[str]) -> list[str]:
    """Each statement ends with ``;`` and reads ``NAME_ro``/``NAME_rt`` of a table the docs create."""
    problems = []
    statements = [s.strip() for s in code.split(";") if s.strip()]
    if not code.rstrip().endswith(";"):
        problems.append("a SQL statement without its ';'")
    for statement in statements:
        if not re.match(r"(?i)^(SELECT|CREATE|INSERT)\b", statement):
            problems.append(f"not a statement the docs use: {statement!r}")
        for name in re.findall(r"(?i)\bFROM\s+([\w.]+)", statement):
            table = name.split(".")[-1]
            base, _, view = table.rpartition("_")
            if view not in ("ro", "rt") or base not in tables:
                problems.append(f"{name}: not the _ro/_rt view of a table the docs create ({sorted(tables)})")
    return problems


# -- Python that is not run ----------------------------------------------------------------

def check_python(code: str) -> list[str]:
    """Compile; every call of ``memtier.*``, ``memtier.spark.*``, ``HudiTable.*`` and a
    client's methods binds to the callable's signature; every config key in a dict literal
    is declared in memtier/config.py."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return [f"does not compile: {e}"]
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            target = _api(node.func)
            if target is not None:
                problems += _bind(target, node)
        if isinstance(node, ast.Dict):
            items = {k.value: v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else None
                     for k, v in zip(node.keys, node.values, strict=True)
                     if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            problems += _config_problems({k: v for k, v in items.items() if k.split(".")[0] in _PREFIXES})
    return problems


_PREFIXES = {key.split(".", 1)[0] for key in KEYS}


def _api(func: ast.expr) -> tuple[str, Callable[..., Any]] | None:
    import memtier
    import memtier.spark
    from memtier.client import Client

    dotted = ast.unparse(func)
    roots: dict[str, Any] = {"memtier": memtier, "memtier.spark": memtier.spark, "HudiTable": memtier.HudiTable,
                             "memtier.HudiTable": memtier.HudiTable,
                             "client": Client}
    owner, _, name = dotted.rpartition(".")
    if owner in roots:
        found = getattr(roots[owner], name, None)
        if found is None:
            return dotted, None  # type: ignore[return-value]
        return dotted, found
    return None


def _bind(target: tuple[str, Callable[..., Any] | None], call: ast.Call) -> list[str]:
    dotted, function = target
    if function is None:
        return [f"{dotted}: no such function in memtier's API"]
    signature = inspect.signature(function)
    positional = [None] * len(call.args)
    if dotted.startswith("client."):
        positional = [None, *positional]  # self
    try:
        signature.bind(*positional, **{k.arg: None for k in call.keywords if k.arg})
    except TypeError as e:
        return [f"{dotted}(...): {e}"]
    return []


def created_tables() -> set[str]:
    """Names the docs' Python blocks create tables under."""
    from tests.support.docblocks import all_blocks

    return {m for b in all_blocks() if b.kind == "python"
            for m in re.findall(r"create_table\(\s*\"(\w+)\"", b.code)}
