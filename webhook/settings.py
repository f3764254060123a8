"""What an operator configures about the webhook's behaviour (flags, Helm values)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TranslationMode = Literal["auto", "always", "audit", "off"]
TRANSLATION_MODES: tuple[TranslationMode, ...] = ("auto", "always", "audit", "off")

# A pod, or every pod of a namespace, opts out of translation with this label (or annotation) set to "false".
TRANSLATE_LABEL = "gpucluster.nvidia.com/translate"


@dataclass(frozen=True)
class Settings:
    """Webhook behaviour. ``operator_namespace`` is excluded from translation.

    ``kubernetes_version`` and ``feature_gates`` (overrides of that version's DRA gate defaults,
    :mod:`gpucluster.dra.gates`) are what the claim feasibility check allocates with.
    """

    translation_mode: TranslationMode = "auto"
    operator_namespace: str = "gpu-operator"
    kubernetes_version: str = "1.34"
    feature_gates: tuple[tuple[str, bool], ...] = ()
