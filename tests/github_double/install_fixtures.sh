#!/usr/bin/env bash
# Install the pinned npm packages the GitHub tests read:
#   @octokit/openapi           generated/api.github.com.json (GitHub's REST OpenAPI description)
#   @octokit/webhooks-examples api.github.com/index.json     (real webhook payloads)
# Versions and integrity hashes are pinned by package.json + package-lock.json next to this
# script; `npm ci` installs exactly those. Idempotent: does nothing when the pins are installed.
#
# Usage: tests/github_double/install_fixtures.sh [DIR]
#   DIR defaults to $KERNEL_BOT_NPM_DIR, else <repo>/.cache/npm
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dir="${1:-${KERNEL_BOT_NPM_DIR:-$repo/.cache/npm}}"

installed_version() {  # prints the installed version of package $1, or nothing
    local manifest="$dir/node_modules/$1/package.json"
    [[ -f "$manifest" ]] && node -p "require(process.argv[1]).version" "$manifest" || true
}

pinned_version() {
    node -p "require(process.argv[1]).dependencies[process.argv[2]]" "$here/package.json" "$1"
}

up_to_date=1
for pkg in @octokit/openapi @octokit/webhooks-examples; do
    if [[ "$(installed_version "$pkg")" != "$(pinned_version "$pkg")" ]]; then
        up_to_date=0
    fi
done
if [[ $up_to_date == 1 ]] && cmp -s "$here/package-lock.json" "$dir/package-lock.json"; then
    echo "npm fixtures already installed in $dir"
    exit 0
fi

mkdir -p "$dir"
cp "$here/package.json" "$here/package-lock.json" "$dir/"
# --ignore-scripts: these are data packages; nothing in them needs to run.
npm ci --prefix "$dir" --ignore-scripts --no-audit --no-fund --loglevel=error
echo "npm fixtures installed in $dir:"
for pkg in @octokit/openapi @octokit/webhooks-examples; do
    echo "  $pkg@$(installed_version "$pkg")"
done
