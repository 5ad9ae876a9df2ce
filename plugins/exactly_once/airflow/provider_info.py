"""Provider metadata: Airflow's ``ProvidersManager`` reads it through the ``apache_airflow_provider``
entry point of the installed package (``airflow providers list`` shows it).

The plugin (UI pages, report link, run notes) is registered once, through the ``airflow.plugins`` entry
point, so this metadata lists no ``plugins``: listing it here too would load it a second time, and
Airflow reports a plugin registered twice as an import error. Importing this module imports no Airflow.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGE = "exactly-once-pipelines"


def package_version() -> str:
    """The installed distribution's version, or ``0+unknown`` when the code runs from a checkout only."""
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "0+unknown"


def get_provider_info() -> dict[str, Any]:
    """The provider's runtime metadata (``airflow/provider_info.schema.json``)."""
    return {
        "package-name": PACKAGE,
        "name": "Exactly-once pipelines",
        "description": "Exactly-once batch pipelines for Airflow + Spark: two-phase-commit sinks, "
                       "checkpointed sources and a data-quality gate.",
        "versions": [package_version()],
        "integrations": [{"integration-name": "Exactly-once pipelines", "tags": ["software"]}],
        "operators": [{"integration-name": "Exactly-once pipelines",
                       "python-modules": ["exactly_once.airflow.operators", "exactly_once.airflow.write",
                                          "exactly_once.airflow.rollback"]}],
        "extra-links": ["exactly_once.airflow.operators.ReportLink"],
    }
