#!/usr/bin/env bash
# Stage 1 of the Action for a labeled PR touching one operator (rmsnorm), timed from the event
# to the results directory, on the GPU (target, with stage 2: at most 5 minutes in all).
# Stage 2 (`bot publish`) needs no GPU; tests/test_e2e_action.py runs it against the GitHub
# double in seconds.
#
#   On the H200 device (no PyGithub/openai there; junit-xml travels as a wheel):
#     pip download --no-deps -d .whl junit-xml==1.9   (here, once; .whl is git-ignored)
#     run(command="python3 -m pip install -q --no-index --target /tmp/site .whl/*.whl && \
#         PYTHONPATH=/tmp/site:. bash ci/evidence/event_to_pr.sh", carry=[".whl"])
#   Locally on CPU: DEVICE=cpu OUT=/tmp/out PYTHONPATH=. bash ci/evidence/event_to_pr.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONPATH="${PYTHONPATH:-}:$root"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
work="$(mktemp -d)"
git() { command git -c user.email=bot@example.com -c user.name=bot "$@"; }
git init -q -b main "$work/repo"
cp -r "$root/problems" "$root/kernels" "$work/repo/"
git -C "$work/repo" add -A && git -C "$work/repo" commit -qm "kernels"
base=$(git -C "$work/repo" rev-parse HEAD)
git -C "$work/repo" checkout -q -b feature
echo "# touched by the PR" >> "$work/repo/kernels/rmsnorm_triton.py"
git -C "$work/repo" commit -qam "touch rmsnorm"
head=$(git -C "$work/repo" rev-parse HEAD)
cat > "$work/event.json" <<JSON
{"action": "labeled", "label": {"name": "optimize-kernel"},
 "pull_request": {"number": 1, "labels": [{"name": "optimize-kernel"}],
   "head": {"ref": "feature", "sha": "$head", "repo": {"full_name": "octo-org/octo-repo"}, "user": {"login": "octocat"}},
   "base": {"ref": "main", "sha": "$base", "repo": {"full_name": "octo-org/octo-repo"}}},
 "repository": {"full_name": "octo-org/octo-repo", "default_branch": "main"}}
JSON
start=$(date +%s.%N)
GITHUB_EVENT_PATH="$work/event.json" GITHUB_EVENT_NAME=pull_request GITHUB_REPOSITORY=octo-org/octo-repo \
GITHUB_WORKSPACE="$work/repo" GITHUB_STEP_SUMMARY="$out/summary.md" GITHUB_OUTPUT="$out/output.txt" \
    "${PYTHON:-python3}" -m bot run --results "$out/results" --device "${DEVICE:-cuda}" ${EXTRA_ARGS:-} \
    2> "$out/stage1.log"
end=$(date +%s.%N)
"${PYTHON:-python3}" - "$start" "$end" "$out" <<'PY'
import json, sys
start, end, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
data = json.load(open(f"{out}/results/results.json"))
for p in data["problems"]:
    best = p["best"]
    print(f"{p['problem']}: {'%.2fx %s' % (best['speedup'], best['speedup_ci']) if best else 'no significant improvement'}")
print(f"stage 1, event to results directory: {end - start:.1f} s")
PY
cat "$out/output.txt"
