"""The conformance suite: one abstract set of tests run against every target (see conftest.py).

A package, so that its conftest is imported as ``conformance.conftest`` and never shadows the root
``conftest`` that other test modules import helpers from."""
