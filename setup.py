"""One import namespace from the repo's top-level folders: ``gpucluster/`` is the core, and the
shells beside it install as its subpackages (``webhook/`` as ``gpucluster.webhook``, ``cli/`` as
``gpucluster.cli``, ...), so the wheel puts ``gpucluster`` alone on the path. Also ships the Helm
chart inside the wheel (as ``gpucluster/_chart``): the CRDs ``gpucluster run`` installs and the
values it reads are package data once installed, where the checkout is gone. Everything else is in
pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CHART = ROOT / "charts" / "gpucluster"
# import name -> folder of the checkout
NAMESPACE = {
    "gpucluster": "gpucluster",
    "gpucluster.cli": "cli",
    "gpucluster.webhook": "webhook",
    "gpucluster.controller": "controller",
    "gpucluster.certs": "certs",
    "gpucluster.sandbox": "sandbox",
}


def packages() -> list[str]:
    """Every package under each folder, named in the namespace; a folder mapped on its own is not
    also found under its parent's."""
    mapped = set(NAMESPACE.values())
    found = []
    for name, folder in NAMESPACE.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / folder).parts
            if folder == "gpucluster" and parts and parts[0] in mapped:
                continue
            found.append(".".join((name, *parts)))
    return found


class BuildPyWithChart(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the chart from the checkout
        target = Path(self.build_lib) / "gpucluster" / "_chart"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(CHART, target)


setup(packages=packages(), package_dir=NAMESPACE, cmdclass={"build_py": BuildPyWithChart})
