"""Where the Helm chart is: inside the installed package (``gpucluster/_chart``, put there by
setup.py when the wheel is built), else beside the code in a checkout (``charts/gpucluster``)."""

from __future__ import annotations

from pathlib import Path

_PACKAGED = Path(__file__).resolve().with_name("_chart")
_CHECKOUT = Path(__file__).resolve().parents[1] / "charts" / "gpucluster"


def chart_dir() -> Path:
    """The chart directory (``Chart.yaml``, ``values.yaml``, ``crds/``, ``templates/``)."""
    return _PACKAGED if (_PACKAGED / "Chart.yaml").is_file() else _CHECKOUT
