"""The table page's actions on one real ``airflow api-server`` (a package: its conftest's server is shared by
its modules and stopped after them)."""
