"""Start-up stays at interpreter speed: `--help`/`--version` import no command module, commands that
do not talk to a cluster never import the Kubernetes client, and the static help table is the
commands' own."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpucluster.cli import COMMANDS, build_parser

# Prints, as JSON, which heavy modules the given argv imported (the command may exit through
# SystemExit: --help and --version do).
PROBE = """
import json, sys
from gpucluster.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = ("kubernetes", "aiohttp", "lark", "gpucluster.cli.", "gpucluster.dra.cel.parser", "yaml")
print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))), file=sys.stderr)
"""


def imported(*argv: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60, check=False)
    return list(json.loads(out.stderr.strip().splitlines()[-1]))


def test_static_help_table_is_each_commands_own_help() -> None:
    parser = build_parser()  # every command module, as tests and docs see them
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in subparsers._choices_actions}
    assert helps == COMMANDS


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []])
def test_top_level_imports_no_command(argv: list[str]) -> None:
    assert imported(*argv) == []


@pytest.mark.parametrize("command", ["sandbox", "validate", "render", "admit", "match", "explain", "migrate", "apply"])
def test_offline_commands_do_not_import_the_kubernetes_client(command: str) -> None:
    modules = imported(command, "--help")
    assert f"gpucluster.cli.{command}" in modules
    # No other command, and not the client; the shared options module is no command.
    others = [m for m in modules if m.startswith(("kubernetes", "gpucluster.cli.")) and not m.endswith(command)]
    assert not [m for m in others if m != "gpucluster.cli.options"]


def test_certs_generate_does_not_import_the_kubernetes_client() -> None:
    assert not [m for m in imported("certs", "generate", "--help") if m.startswith("kubernetes")]


def test_a_command_help_is_its_full_parser() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gpucluster.cli", "explain", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "--cluster" in out.stdout


def _fastest(argv: list[str], runs: int = 7) -> float:
    import time

    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, timeout=60, check=True)
        best = min(best, time.perf_counter() - start)
    return best


def test_version_starts_within_five_times_a_bare_interpreter() -> None:
    # Fastest of several runs on each side: the machine is shared, the floor is what we compare.
    bare = _fastest([sys.executable, "-c", "pass"])
    version = _fastest([sys.executable, "-m", "gpucluster.cli", "--version"])
    assert version <= 5 * bare, f"--version {version * 1000:.0f} ms vs python -c pass {bare * 1000:.0f} ms"


def test_the_shipped_cel_parser_is_built_from_todays_grammar() -> None:
    from gpucluster.dra.cel import parser

    assert parser.built_parser_is_current(), "cel.lark changed: run `make cel-parser` and commit cel.lark.built"


def test_the_shipped_cel_parser_parses_as_the_grammar_does() -> None:
    from gpucluster.dra.cel import parser

    built = parser._build(parser._GRAMMAR.read_bytes())
    loaded = parser._load_or_build()
    assert loaded is not built
    for text in ['device.attributes["x"].?y.orValue(1) > 2', "[1, 2].all(x, x > 0) && has(a.b)", "{'k': b'\\x00'}"]:
        assert loaded.parse(text) == built.parse(text)


def test_a_stale_built_parser_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucluster.dra.cel import parser

    stale = tmp_path / "cel.lark.built"
    stale.write_bytes(b"gpucluster-cel-parser grammar=0 lark=0\nnot a parser")
    monkeypatch.setattr(parser, "_BUILT", stale)
    assert parser._load_or_build().parse("1 + 2") is not None
