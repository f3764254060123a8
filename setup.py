"""Ships the Helm chart inside the wheel (as ``gpucluster/_chart``): the CRDs ``gpucluster run``
installs and the values it reads are package data once installed, where the checkout is gone.
Everything else is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CHART = Path(__file__).resolve().parent / "charts" / "gpucluster"


class BuildPyWithChart(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the chart from the checkout
        target = Path(self.build_lib) / "gpucluster" / "_chart"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(CHART, target)


setup(cmdclass={"build_py": BuildPyWithChart})
