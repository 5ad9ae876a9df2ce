"""The repo's own convenience: Airflow imports every .py file in its plugins folder, so a checkout whose
plugins/ is that folder gets the plugin without installing the package.

An installed package registers the plugin through its ``airflow.plugins`` entry point; this file then
defines nothing, so Airflow loads the plugin once (a second registration under the same name is
reported as a plugin import error).
"""
from importlib.metadata import entry_points

ENTRY_POINT = "exactly_once.airflow.plugin:ExactlyOncePlugin"

if not any(ep.value == ENTRY_POINT for ep in entry_points(group="airflow.plugins")):
    from exactly_once.airflow.plugin import ExactlyOncePlugin

    __all__ = ["ExactlyOncePlugin"]
