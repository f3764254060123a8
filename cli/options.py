"""The options several commands share, defined once: the kubeconfig, logging and the operator's
namespace, with one help text each."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
KUBECONFIG_DEFAULT = "in-cluster when run in a pod, else $KUBECONFIG, else ~/.kube/config"


def add_kubeconfig(parser: Any, *, default: str = KUBECONFIG_DEFAULT) -> None:
    """``--kubeconfig F`` (``parser`` may be a group); ``default`` says where the command looks without it."""
    parser.add_argument("--kubeconfig", metavar="F", help=f"kubeconfig file of the cluster (default: {default})")


def add_logging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format", choices=["text", "json"], default="text", help="log lines as logfmt text or JSON (default text)"
    )
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default="info",
        metavar="LEVEL",
        help=f"the least severe level logged: {', '.join(LOG_LEVELS)} (default info)",
    )


def add_operator_namespace(parser: argparse.ArgumentParser, *, flag: str = "--namespace") -> None:
    parser.add_argument(
        flag,
        default=os.environ.get("OPERATOR_NAMESPACE", "gpu-operator"),
        metavar="NS",
        help="the operator's namespace (default: $OPERATOR_NAMESPACE, else gpu-operator)",
    )


def finite(text: str) -> float:
    """An argparse type: a number that is not NaN or infinite (``float`` takes both, and a NaN
    passes every range check: as a timeout it is reached at once, so a loop would spin)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, more than 0."""
    value = finite(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return value
