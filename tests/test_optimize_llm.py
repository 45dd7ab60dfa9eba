"""The refinement loop end to end: the real openai client over real HTTP to a scripted
OpenAI-compatible server, every answer verified in a sandboxed worker, feedback into the
next prompt, budgets honoured, and the key never printed."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import CANDIDATES, PROBLEMS, ROOT
from openai_double import Answer, Delay, Malformed, OpenAIDouble, Status

from bot.engine.evaluation.options import EvalOptions
from bot.engine.loop.attempts import OptimizeOptions
from bot.engine.loop.optimize import optimize
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import default_baseline
from bot.engine.workspace.problems import load_problem
from bot.propose.llm import LlmProposer
from bot.propose.llm_settings import LlmEndpoint
from bot.sandbox import Limits

KEY = "sk-kernelbot-test-key-DO-NOT-PRINT-123"
HONEST = (CANDIDATES / "honest.py").read_text()
LOW_PRECISION = (CANDIDATES / "cheat_low_precision.py").read_text()
CHEAT = (CANDIDATES / "cheat_stale_after_warmup.py").read_text()
SYNTAX = HONEST.replace("def forward(self, x):", "def forward(self, x)")


def block(code: str) -> str:
    return f"Here is the kernel.\n```python\n{code}\n```\n"


def _options(**kw) -> OptimizeOptions:
    evaluation = EvalOptions(
        device="cpu",
        use_cache=False,
        limits=Limits(memory_mb=4096, call_timeout_s=20),
        timing=TimingOptions(time_cap_s=0.3, min_samples=5),
    )
    return OptimizeOptions(strategy="llm", model="test-model", samples=1, evaluation=evaluation, **kw)


def _run(script, rounds=2, stream=False, **kw):
    problem = load_problem(PROBLEMS / "scale_add.py")
    with OpenAIDouble(script) as srv:
        endpoint = LlmEndpoint(
            base_url=srv.base_url,
            api_key=KEY,
            stream=stream,
            timeout_s=kw.pop("timeout_s", 30.0),
            sleep=lambda s: None,
        )
        proposer = LlmProposer(
            "test-model", samples=1, max_total_tokens=kw.pop("max_total_tokens", None), endpoint=endpoint
        )
        run = optimize(problem, default_baseline(problem), _options(max_rounds=rounds, **kw), proposer=proposer)
        prompts = [r.body["messages"][-1]["content"] for r in srv.requests if r.body]
        systems.extend(r.body["messages"][0]["content"] for r in srv.requests if r.body)
    return run.result, prompts


systems: list[str] = []  # the system messages of the last runs, for the hardware they describe


def _statuses(result):
    return [(a.round, a.status) for a in result.attempts]


def test_right_first_time_streamed():
    result, prompts = _run([Answer(block(HONEST))], rounds=1, stream=True)
    assert _statuses(result) == [(1, "accepted")]
    assert result.attempts[0].origin.strategy == "llm"
    assert result.llm["tokens"] > 0 and len(prompts) == 1


def test_prompt_describes_the_device_the_job_runs_on():
    systems.clear()
    _run([Answer(block(HONEST))], rounds=1)
    assert systems and all("no GPU, candidates run on the CPU" in s for s in systems)
    assert not any("H200" in s or "SMs" in s for s in systems)


def test_syntax_error_then_fix_feeds_the_line_back():
    result, prompts = _run([Answer(block(SYNTAX)), Answer(block(HONEST))])
    assert _statuses(result) == [(2, "accepted")]  # the syntax error never reached a worker
    assert "def forward(self, x)" in prompts[1] and "syntax" in prompts[1].lower()


def test_numerical_mismatch_then_fix_feeds_the_evidence_back():
    result, prompts = _run([Answer(block(LOW_PRECISION)), Answer(block(HONEST))])
    assert _statuses(result) == [(1, "rejected"), (2, "accepted")]
    assert "normwise rel err" in prompts[1] or "abs err" in prompts[1]


def test_cheating_answer_is_rejected_and_never_selected():
    result, _ = _run([Answer(block(CHEAT))], rounds=1, min_speedup=0.01)
    assert _statuses(result) == [(1, "rejected")]
    assert "timed-call outputs" in result.attempts[0].reason
    assert result.best is None


def test_empty_and_malformed_answers_then_success():
    result, prompts = _run([Answer("I cannot help with that."), Malformed(), Answer(block(HONEST))], rounds=3)
    assert _statuses(result) == [(3, "accepted")]
    assert "empty" in prompts[1].lower() or "no python" in prompts[1].lower()


def test_rate_limit_and_timeout_are_retried():
    result, _ = _run([Status(429, {"Retry-After": "1"}), Delay(3.0), Answer(block(HONEST))], rounds=1, timeout_s=1.0)
    assert _statuses(result) == [(1, "accepted")]


def test_wall_clock_budget_stops_the_loop():
    # The first round always starts; judging its answer (workers, trials against the reference)
    # takes far longer than this budget, so no second round may start. (A budget of 1 s held
    # only while workers took longer than that to start: forked ones do not.)
    result, prompts = _run([Answer(block(LOW_PRECISION))] * 5, rounds=5, budget_s=0.1)
    assert result.stopped == "budget" and len(prompts) == 1
    assert _statuses(result) == [(1, "rejected")]


def test_token_budget_stops_the_loop():
    result, prompts = _run([Answer(block(LOW_PRECISION))] * 5, rounds=5, max_total_tokens=10)
    assert result.stopped.startswith("token budget") and prompts == []


def test_cli_json_and_out_never_contain_the_key(tmp_path):
    out = tmp_path / "out"
    with OpenAIDouble([Answer(block(LOW_PRECISION)), Answer(block(HONEST))]) as srv:
        env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": srv.base_url, "HOME": str(tmp_path)}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "bot",
                "-v",
                "optimize",
                str(PROBLEMS / "scale_add.py"),
                "--strategy",
                "llm",
                "--model",
                "test-model",
                "--device",
                "cpu",
                "--max-rounds",
                "2",
                "--samples",
                "1",
                "--time-cap-s",
                "0.3",
                "--json",
                "--out",
                str(out),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert [(a["round"], a["status"]) for a in data["attempts"]] == [(1, "rejected"), (2, "accepted")]
    assert set(data) >= {"best", "attempts"} and all("reason" in a for a in data["attempts"])
    assert KEY not in proc.stdout and KEY not in proc.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name.startswith("transcript") for p in files)
    for path in files:
        assert KEY not in path.read_text(errors="replace"), path
