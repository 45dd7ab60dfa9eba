"""Rendering from results: markdown, JUnit XML, JSON tables, the chart and the pull request plan.

Reads results (dicts and core dataclasses) and writes text; no torch, nothing of the engine,
the harness or the GitHub edge (enforced by the import contracts in pyproject.toml).
"""
