"""The layers point one way, and every module is in one import namespace.

The repo's top-level folders install as one package (setup.py's ``NAMESPACE``): ``gpucluster/``
is ``gpucluster``, ``webhook/`` is ``gpucluster.webhook``, ``cli/`` is ``gpucluster.cli``, ...

- **Core** (``gpucluster/`` but ``gpucluster.kube``: ``api``, ``dra``, ``translate``, ``policy``,
  ``migrate``, ``audit``, ``clusterstate``, ...). Pure functions of plain data; imports only the
  core and third-party libraries, never the Kubernetes client or aiohttp.
- **Kubernetes toolkit** ``gpucluster.kube``: the I/O the shells share (client, reflector,
  workqueue, events). It may import the core; the core never imports it.
- **Shells**: ``gpucluster.webhook``, ``.controller``, ``.certs``, ``.sandbox``. They import the
  core and the toolkit, not each other, but for the sandbox's API server, which serves with
  certificates from ``certs`` as the webhook does.
- **CLI** ``gpucluster.cli`` (``cli/``): the top layer, the console script's. Each command wires a
  shell to the core; nothing below imports it.

The imports are read from the source (``ast``, nothing is imported), including the ones inside
functions and ``TYPE_CHECKING`` blocks, relative imports, and ``importlib.import_module`` calls
with a literal name.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.namespace import folders

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = folders()  # folder of the checkout -> import name, as setup.py installs them
SHELL_FOLDERS = ("webhook", "controller", "certs", "sandbox")
SHELLS = tuple(FOLDERS[f] for f in SHELL_FOLDERS)
CLI = ("gpucluster.cli",)
TOOLKIT = ("gpucluster.kube",)
IO_CLIENTS = ("kubernetes", "aiohttp")
# the one import between shells: the sandbox's API server serves with the project's certificates
SHELL_TO_SHELL = {("gpucluster.sandbox", "gpucluster.certs")}


def _module_name(path: Path) -> str:
    folder, *parts = path.relative_to(ROOT).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([FOLDERS.get(folder, folder), *parts])


def _modules(folder: str) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / folder).rglob("*.py"))}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def imports(source: str, module: str, *, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, the source of ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # from pkg import submodule
                yield node.lineno, f"{target}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "import_module")
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


@functools.cache  # every rule reads the same files
def _imports_of(path: Path) -> tuple[tuple[int, str], ...]:
    return tuple(imports(path.read_text(), _module_name(path), is_package=path.name == "__init__.py"))


def core_modules() -> dict[str, Path]:
    return {
        name: path
        for name, path in _modules("gpucluster").items()
        if not _within(name, CLI) and not _within(name, TOOLKIT)
    }


def violations(modules: dict[str, Path], forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in modules.values()
        for line, target in _imports_of(path)
        if _within(target, forbidden)
    ]


def test_the_core_is_what_the_rule_says() -> None:
    core = core_modules()
    for name in ("gpucluster.audit", "gpucluster.translate", "gpucluster.policy", "gpucluster.dra.allocator"):
        assert name in core
    assert not any(_within(name, (*CLI, *TOOLKIT)) for name in core)


def test_the_core_never_imports_a_shell_the_cli_or_the_kubernetes_toolkit() -> None:
    assert violations(core_modules(), (*SHELLS, *CLI, *TOOLKIT)) == []


def test_the_core_never_imports_the_kubernetes_client_or_aiohttp() -> None:
    assert violations(core_modules(), IO_CLIENTS) == []


def test_dra_never_imports_the_kubernetes_client_or_aiohttp() -> None:
    dra = {name: path for name, path in core_modules().items() if _within(name, ("gpucluster.dra",))}
    assert "gpucluster.dra.allocator" in dra
    assert violations(dra, IO_CLIENTS) == []


@pytest.mark.parametrize("folder", SHELL_FOLDERS)
def test_no_shell_imports_the_cli(folder: str) -> None:
    assert violations(_modules(folder), CLI) == []


@pytest.mark.parametrize("folder", SHELL_FOLDERS)
def test_shells_do_not_import_each_other(folder: str) -> None:
    shell = FOLDERS[folder]
    others = tuple(s for s in SHELLS if s != shell and (shell, s) not in SHELL_TO_SHELL)
    assert violations(_modules(folder), others) == []


def test_every_module_is_in_the_one_namespace() -> None:
    """No module imports a shell by its folder's name: installed, only ``gpucluster`` is there."""
    bare = tuple(f for f in FOLDERS if f != "gpucluster")
    everything = {
        name: path for folder in [*FOLDERS, "tests", "tools", "bench"] for name, path in _modules(folder).items()
    }
    assert violations(everything, bare) == []


def test_the_cli_is_the_top_layer() -> None:
    """The CLI reaches every shell; the folder holding it is not the core's."""
    cli = _modules("cli")
    assert "gpucluster.cli.run" in cli and not any(_within(name, CLI) for name in core_modules())
    reached = {target for path in cli.values() for _, target in _imports_of(path)}
    for shell in SHELLS:
        assert any(_within(target, (shell,)) for target in reached), shell


def test_the_toolkit_never_imports_a_shell_or_the_cli() -> None:
    assert violations(_modules("gpucluster/kube"), (*SHELLS, *CLI)) == []


@pytest.mark.parametrize(
    ("source", "module", "found"),
    [
        ("import gpucluster.webhook.admission", "gpucluster.audit", "gpucluster.webhook.admission"),
        ("from gpucluster.webhook.rules import pods", "gpucluster.audit", "gpucluster.webhook.rules.pods"),
        (
            "def f():\n    from gpucluster.controller import reconcile",
            "gpucluster.dra.model",
            "gpucluster.controller.reconcile",
        ),
        ("from ..cli import audit", "gpucluster.dra.model", "gpucluster.cli.audit"),
        ("from . import cli", "gpucluster", "gpucluster.cli"),
        ("importlib.import_module('gpucluster.sandbox.server')", "gpucluster.translate", "gpucluster.sandbox.server"),
        ("import webhook.admission", "gpucluster.audit", "webhook.admission"),
        ("from kubernetes.aio import client", "gpucluster.dra.pools", "kubernetes.aio"),
    ],
)
def test_every_form_of_import_is_seen(source: str, module: str, found: str) -> None:
    names = {name for _, name in imports(source, module, is_package=module == "gpucluster")}
    assert found in names


def _runtime_edges(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports when it runs (lazy imports in functions
    included, ``if TYPE_CHECKING:`` blocks not). ``from pkg import submodule`` is an edge to the
    submodule, not to the package."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    edges: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            edges |= subs
            if len(subs) < len(node.names) and node.module in known:
                edges.add(node.module)
    return edges - {_module_name(path)}


def import_cycles(packages: tuple[str, ...]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    modules = {name: path for package in packages for name, path in _modules(package).items()}
    graph = {name: _runtime_edges(path, set(modules)) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return cycles


def test_no_module_imports_itself_through_others() -> None:
    """dra/gates <-> dra/model and sandbox/apiserver core <-> rbac <-> rbac_bootstrap used to."""
    assert import_cycles(tuple(FOLDERS)) == []
