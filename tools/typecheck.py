"""``make typecheck``: mypy --strict over the package as it installs.

mypy names a module after its file's place, and cannot map ``webhook/`` to ``gpucluster.webhook``
as setuptools' ``package_dir`` does. So this lays the installed shape out as a tree of links to
the checkout's files under ``build/typecheck/`` (made afresh each run: a new file is never
missed), runs mypy there with the project's configuration, and prints its findings with the
checkout's own paths."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tools.namespace import ROOT, namespace

TREE = ROOT / "build" / "typecheck"
EXTRA = ("tools",)  # checked too, under their own names
# Laid out for the tools that import them (make try-chart drives the end-to-end harness) and read
# silently: their types are used, their own findings are not reported (pyproject's overrides).
FOLLOWED = ("tests",)
SUFFIXES = (".py", ".pyi", ".typed")


def lay_out(tree: Path = TREE) -> dict[str, str]:
    """Link every source file where the wheel puts it; the prefixes to print back (tree path ->
    checkout path)."""
    shutil.rmtree(tree, ignore_errors=True)
    places = {name.replace(".", "/"): folder for name, folder in namespace().items()}
    places.update({folder: folder for folder in (*EXTRA, *FOLLOWED)})
    mapped = set(places.values())
    for place, folder in places.items():
        source = ROOT / folder
        for path in source.rglob("*"):
            rel = path.relative_to(source)
            if path.is_dir() or path.suffix not in SUFFIXES or "__pycache__" in rel.parts:
                continue
            if folder == "gpucluster" and rel.parts[0] in mapped:
                continue
            target = tree / place / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path)
    return {f"{place}/": f"{folder}/" for place, folder in sorted(places.items(), key=lambda kv: -len(kv[0]))}


def main(argv: list[str]) -> int:
    prefixes = lay_out()
    mypy = Path(sys.executable).with_name("mypy")
    command = [str(mypy), "--config-file", str(ROOT / "pyproject.toml"), *argv, "gpucluster", *EXTRA]
    env = {**os.environ, "MYPY_CACHE_DIR": str(ROOT / ".mypy_cache")}
    done = subprocess.run(command, cwd=TREE, capture_output=True, text=True, env=env, check=False)
    for stream, text in ((sys.stdout, done.stdout), (sys.stderr, done.stderr)):
        for line in text.splitlines(keepends=True):
            for place, folder in prefixes.items():
                if line.startswith(place):
                    line = folder + line[len(place) :]
                    break
            stream.write(line)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
