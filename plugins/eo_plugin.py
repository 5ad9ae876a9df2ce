"""Airflow plugin entry point (Airflow imports every .py file in plugins/ that .airflowignore allows)."""
from exactly_once.airflow.plugin import ExactlyOncePlugin

__all__ = ["ExactlyOncePlugin"]
