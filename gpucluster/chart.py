"""Where the Helm chart is: inside the installed package (``gpucluster/_chart``, put there by
setup.py when the wheel is built), else beside the code in a checkout (``charts/gpucluster``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_PACKAGED = Path(__file__).resolve().with_name("_chart")
_CHECKOUT = Path(__file__).resolve().parents[1] / "charts" / "gpucluster"


def chart_dir() -> Path:
    """The chart directory (``Chart.yaml``, ``values.yaml``, ``crds/``, ``templates/``)."""
    return _PACKAGED if (_PACKAGED / "Chart.yaml").is_file() else _CHECKOUT


def _image(values: Any) -> str:
    if not isinstance(values, dict) or not all(values.get(k) for k in ("repository", "image", "version")):
        return ""
    separator = "@" if str(values["version"]).startswith("sha256:") else ":"
    return f"{values['repository']}/{values['image']}{separator}{values['version']}"


def operand_images() -> dict[str, str]:
    """The operand image variables the chart's default values give the operator (DRA_DRIVER_IMAGE,
    DCGM_EXPORTER_IMAGE, DCGM_IMAGE, VALIDATOR_IMAGE; the validator defaults to the driver's)."""
    import yaml

    values_file = chart_dir() / "values.yaml"
    try:
        values = yaml.safe_load(values_file.read_text()) if values_file.is_file() else {}
    except (OSError, yaml.YAMLError):
        values = {}
    values = values if isinstance(values, dict) else {}
    driver = _image((values.get("gpuCluster") or {}).get("draDriver"))
    images = {
        "DRA_DRIVER_IMAGE": driver,
        "DCGM_EXPORTER_IMAGE": _image(values.get("dcgmExporter")),
        "DCGM_IMAGE": _image(values.get("dcgm")),
        "VALIDATOR_IMAGE": _image(values.get("validator")) or driver,
    }
    return {k: v for k, v in images.items() if v}
