"""Pure rendering of the GPUCluster operands: ``(GPUCluster, ClusterFacts) -> objects``.

:func:`render` returns every object to apply, in apply order (DRA driver, DCGM, DCGM Exporter,
DRA validator); :func:`render_operands` returns the same grouped by operand state, with disabled
operands present and empty, so that the reconciler can delete what a state no longer renders.
Every object carries the ``nvidia.com/gpu-operator.state`` label of its operand and, when the
GPUCluster's uid is known, a controller owner reference to it. A spec that cannot be rendered
raises :class:`RenderError` (an ``InputError``) whose message starts with the field path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpucluster.api import gpucluster as gc
from gpucluster.controller.operands.common import (
    DEFAULT_NAMESPACE,
    IMAGE_ENV_NAMES,
    MANAGED_BY,
    STATE_DCGM,
    STATE_DCGM_EXPORTER,
    STATE_DRA_DRIVER,
    STATE_DRA_VALIDATION,
    STATE_LABEL,
    STATES,
    ClusterFacts,
    Obj,
    RenderError,
)
from gpucluster.controller.operands.dcgm import render_dcgm
from gpucluster.controller.operands.dcgm_exporter import render_dcgm_exporter
from gpucluster.controller.operands.dra_driver import render_dra_driver
from gpucluster.controller.operands.dra_validator import render_dra_validator

__all__ = [
    "DEFAULT_NAMESPACE",
    "IMAGE_ENV_NAMES",
    "MANAGED_BY",
    "RENDERERS",
    "STATES",
    "STATE_DCGM",
    "STATE_DCGM_EXPORTER",
    "STATE_DRA_DRIVER",
    "STATE_DRA_VALIDATION",
    "STATE_LABEL",
    "ClusterFacts",
    "OperandObjects",
    "RenderError",
    "render",
    "render_dcgm",
    "render_dcgm_exporter",
    "render_dra_driver",
    "render_dra_validator",
    "render_operands",
]

Renderer = Callable[[gc.GPUCluster, ClusterFacts], list[Obj]]

# state -> renderer, in apply order.
RENDERERS: dict[str, Renderer] = {
    STATE_DRA_DRIVER: render_dra_driver,
    STATE_DCGM: render_dcgm,
    STATE_DCGM_EXPORTER: render_dcgm_exporter,
    STATE_DRA_VALIDATION: render_dra_validator,
}


@dataclass(frozen=True)
class OperandObjects:
    """The objects one operand state renders; empty when the operand is disabled."""

    state: str
    objects: list[Obj]

    @property
    def enabled(self) -> bool:
        return bool(self.objects)


def render_operands(cluster: gc.GPUCluster, facts: ClusterFacts) -> list[OperandObjects]:
    """Every operand state in apply order, disabled ones with no objects."""
    return [OperandObjects(state, renderer(cluster, facts)) for state, renderer in RENDERERS.items()]


def render(cluster: gc.GPUCluster, facts: ClusterFacts | None = None) -> list[Obj]:
    """All objects to apply for ``cluster``, in apply order."""
    facts = facts or ClusterFacts()
    return [obj for operand in render_operands(cluster, facts) for obj in operand.objects]
