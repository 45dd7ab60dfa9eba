#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh CPU machine, then run it.
#   bash ci/test.sh [pytest args...]
# Idempotent: a second run reuses the virtual environment and the npm fixtures.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv="${KERNEL_BOT_VENV:-.venv}"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
# Pin the CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build. Triton
# is pinned too: the interpreter's behaviour and the sm_90 build check (ci/compile_kernels_sm90.py)
# lean on it, and a new release should change CI only when we ask it to.
"$venv/bin/pip" install -q --disable-pip-version-check torch==2.13.0 triton==3.9.0
"$venv/bin/pip" install -q --disable-pip-version-check -e '.[test]'

# Real parts, not mocks: GitHub's OpenAPI description and webhook examples (npm), a Docker
# engine for the container sandbox, lint tools for the workflows.
bash tests/github_double/install_fixtures.sh
[[ -f ci/install-lint-tools.sh ]] && PYTHON="$venv/bin/python" bash ci/install-lint-tools.sh
[[ -f ci/start-dockerd.sh ]] && bash ci/start-dockerd.sh

# Three processes for the tests that judge what code does (much of a test is waiting on workers,
# containers and stall bounds, so three share the 2 cores well; a module stays in one process for
# its fixtures); then, alone, the tests that assert what real timing claims, which a busy
# machine would make inconclusive. The slowest tests are named: what to look at when it grows.
status=0
"$venv/bin/python" -m pytest -q -n 3 --dist loadfile -m "not timing" --durations=15 "$@" || status=$?
"$venv/bin/python" -m pytest -q -m timing --durations=5 "$@" || status=$?
exit "$status"
