"""The options several commands share, defined once: the kubeconfig, logging and the operator's
namespace, with one help text each."""

from __future__ import annotations

import argparse
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
