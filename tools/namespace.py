"""The one import namespace, as setup.py installs it: ``NAMESPACE`` maps each import name to a
folder of the checkout (``gpucluster.webhook`` -> ``webhook/``). Read from setup.py's literal, so
the layering test and the type check see the layout the wheel has, with no second copy of it."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@cache
def namespace() -> dict[str, str]:
    """import name -> folder, in setup.py's order."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NAMESPACE" for t in node.targets):
            value = ast.literal_eval(node.value)
            if isinstance(value, dict):
                return {str(k): str(v) for k, v in value.items()}
    raise LookupError("setup.py assigns no NAMESPACE dict")


def folders() -> dict[str, str]:
    """folder -> import name."""
    return {folder: name for name, folder in namespace().items()}
