"""The domain: dataclasses, errors, statistics and checks over plain data.

Pure: no torch, no subprocess, no file or network I/O, nothing of the packages above it
(enforced by the import contracts in pyproject.toml). Both stages and the worker import it.
"""
