"""LlmProposer through the real openai client over real HTTP, against a scripted double."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import openai
import pytest

from bot.core.domain import CandidateSource, Origin, Problem, Shape
from bot.propose.base import H200, BudgetExhausted, Feedback, Hardware, ProposalRequest
from bot.propose.llm import LlmError, LlmProposer, redact
from bot.propose.llm_settings import LlmEndpoint, LlmGeneration, LlmPricing
from bot.propose.parse import parse_answer, split_think
from bot.propose.prompt import build_messages, format_feedback

try:
    from tests.openai_double import Answer, Delay, Malformed, OpenAIDouble, Status
except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    from openai_double import Answer, Delay, Malformed, OpenAIDouble, Status

FAKE_KEY = "sk-kbtest-7Q2x9ZpL4mWv8RtY3nB6cD1e"
REFERENCE = """import torch

class Model(torch.nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, self.alpha)

N = 1 << 20
def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return [0.01]
"""
CURRENT = "# TARGET: ops/leaky.py\nimport torch\nclass Model(torch.nn.Module):\n    pass  # current\n"
GOOD = """import torch

class ModelNew(torch.nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return torch.where(x > 0, x, x * self.alpha)
"""
BAD_SYNTAX = GOOD.replace("return torch.where(x > 0, x, x * self.alpha)", "return torch.where(x > 0, x, x * self.alpha")


def block(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}```"


def make_problem() -> Problem:
    return Problem(
        path=Path("problems/leaky_relu.py"),
        name="leaky_relu",
        source=REFERENCE,
        root=Path("."),
        target_relpath="ops/leaky.py",
        gpu_shapes=(Shape("main"), Shape("odd", {"N": 1000003})),
        cpu_shapes=(),
        tolerance={"elem_rtol": 1e-5},
        distributions=("normal",),
        reference_precision="float64",
        watch=(),
    )


def make_request(
    history: tuple[Feedback, ...] = (),
    samples: int = 1,
    backend: str = "triton",
    floor_us: float | None = 1.75,
    round_: int = 0,
    hardware: Hardware = H200,
) -> ProposalRequest:
    return ProposalRequest(
        problem=make_problem(),
        current_source=CURRENT,
        hardware=hardware,
        floor_us=floor_us,
        round=round_,
        samples=samples,
        history=history,
        backend=backend,
    )


@pytest.fixture
def sleeps() -> list[float]:
    return []


def proposer(
    srv: OpenAIDouble,
    sleeps: list[float],
    *,
    max_total_tokens: int | None = None,
    generation: LlmGeneration | None = None,
    pricing: LlmPricing | None = None,
    transcript_path: Path | None = None,
    **endpoint,
) -> LlmProposer:
    """A proposer on the double; the remaining keywords are LlmEndpoint fields."""
    endpoint.setdefault("timeout_s", 5.0)
    return LlmProposer(
        "r1-test",
        max_total_tokens=max_total_tokens,
        endpoint=LlmEndpoint(base_url=srv.base_url, api_key=FAKE_KEY, sleep=sleeps.append, **endpoint),
        generation=generation or LlmGeneration(),
        pricing=pricing or LlmPricing(),
        transcript_path=transcript_path,
    )


# ---- right first time -------------------------------------------------------------------


def test_right_first_time_plain(sleeps):
    with OpenAIDouble(
        [Answer("Here you go:\n" + block(GOOD) + "\nDone.", prompt_tokens=1200, completion_tokens=300)]
    ) as srv:
        p = proposer(
            srv,
            sleeps,
            generation=LlmGeneration(temperature=0.3),
            pricing=LlmPricing(price_per_mtok_in=1.0, price_per_mtok_out=4.0),
        )
        cands = p.propose(make_request())
    assert [c.source for c in cands] == [GOOD]
    origin = cands[0].origin
    assert origin == Origin(
        strategy="llm",
        detail="sample 0",
        model="r1-test",
        round=0,
        parent=hashlib.sha256(CURRENT.encode()).hexdigest()[:16],
    )
    assert origin.parent == CandidateSource("x", CURRENT, origin).source_hash
    (req,) = srv.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {FAKE_KEY}"  # the key is really in play
    assert req.body["model"] == "r1-test" and req.body["temperature"] == 0.3
    assert not req.body.get("stream")
    assert req.body["messages"] == build_messages(make_request())
    assert (p.prompt_tokens, p.completion_tokens, p.tokens_used) == (1200, 300, 1500)
    assert p.cost_usd == pytest.approx((1200 * 1.0 + 300 * 4.0) / 1e6)
    assert p.last_failures == [] and sleeps == []
    entry = p.transcript[0]
    assert (entry.round, entry.sample, entry.error, entry.usage.estimated) == (0, 0, None, False)


def test_right_first_time_streamed(sleeps):
    with OpenAIDouble(
        [Answer(block(GOOD), reasoning="Fuse the select.", prompt_tokens=900, completion_tokens=80)], chunk_chars=5
    ) as srv:
        p = proposer(srv, sleeps, stream=True)
        cands = p.propose(make_request())
    assert [c.source for c in cands] == [GOOD]
    body = srv.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (p.prompt_tokens, p.completion_tokens) == (900, 80)
    assert p.transcript[0].reasoning == "Fuse the select."
    assert p.transcript[0].answer == block(GOOD)


def test_streamed_without_usage_is_estimated(sleeps):
    with OpenAIDouble([Answer(block(GOOD), send_usage=False)]) as srv:
        p = proposer(srv, sleeps, stream=True, max_total_tokens=10**6)
        p.propose(make_request())
    prompt_chars = sum(len(m["content"]) for m in build_messages(make_request()))
    usage = p.transcript[0].usage
    assert usage.estimated
    assert usage.prompt_tokens == pytest.approx(prompt_chars / 4, abs=1)
    assert usage.completion_tokens == pytest.approx(len(block(GOOD)) / 4, abs=1)
    assert p.tokens_used == usage.prompt_tokens + usage.completion_tokens > 0


def test_samples_are_separate_requests_and_env_configures_client(sleeps, monkeypatch):
    other = GOOD.replace("x * self.alpha", "self.alpha * x")
    with OpenAIDouble([Answer(block(GOOD)), Answer(block(other)), Answer(block(GOOD))]) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        p = LlmProposer("r1-test", endpoint=LlmEndpoint(sleep=sleeps.append))
        cands = p.propose(make_request(samples=3, round_=2))
    assert len(srv.requests) == 3 and all("n" not in r.body for r in srv.requests)
    assert srv.requests[0].headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert [c.source for c in cands] == [GOOD, other]  # the duplicate third sample is dropped
    assert [c.origin.detail for c in cands] == ["sample 0", "sample 1"]
    assert {c.origin.round for c in cands} == {2}


# ---- reasoning ----------------------------------------------------------------------------


def test_r1_inline_think_parses_last_block(sleeps):
    draft = GOOD.replace("torch.where", "torch.draft_where")
    answer = (
        f"<think>\nFirst try:\n{block(draft)}\nHmm, better:\n</think>\n{block(draft)}\n"
        f"Final:\n{block(GOOD)}\nUsage:\n```python\nm = ModelNew(0.1)\n```"
    )
    with OpenAIDouble([Answer(answer)]) as srv:
        p = proposer(srv, sleeps)
        cands = p.propose(make_request())
    assert [c.source for c in cands] == [GOOD]
    assert "<think>" in p.transcript[0].answer  # raw answer kept for humans


def test_reasoning_content_is_never_parsed(sleeps):
    with OpenAIDouble(
        [
            Answer(block(GOOD), reasoning="draft:\n" + block(BAD_SYNTAX)),
            Answer("I could not finish.", reasoning=block(GOOD)),
        ]
    ) as srv:
        p = proposer(srv, sleeps)
        cands = p.propose(make_request(samples=2))
    assert [c.source for c in cands] == [GOOD]
    assert [f.status for f in p.last_failures] == ["empty"]
    assert p.transcript[1].reasoning == block(GOOD)


def test_split_think_variants():
    assert split_think("<think>a</think>b") == ("b", "a")
    assert split_think("<think>still thinking " + block(GOOD)) == ("", "still thinking " + block(GOOD))
    assert split_think("template opened it</think>\nanswer") == ("answer", "template opened it")
    assert parse_answer("<think>" + block(GOOD)).status == "empty"
    assert parse_answer("``` \n" + GOOD + "```").code == GOOD  # bare block defining ModelNew
    assert parse_answer("```\n" + GOOD).status == "empty"  # unterminated: truncated answer
    assert parse_answer(block("import torch\nclass Model: pass\n")).status == "empty"
    assert parse_answer(block(GOOD, "py")).code == GOOD


# ---- unusable answers ---------------------------------------------------------------------


def test_syntax_error_reported_with_line(sleeps):
    with OpenAIDouble([Answer(block(BAD_SYNTAX))]) as srv:
        p = proposer(srv, sleeps)
        assert p.propose(make_request()) == []
    (fb,) = p.last_failures
    bad_line = BAD_SYNTAX.splitlines().index("        return torch.where(x > 0, x, x * self.alpha") + 1
    assert fb.status == "syntax_error"
    assert f"line {bad_line}:" in fb.message or f"line {bad_line + 1}:" in fb.message
    assert "torch.where(x > 0, x, x * self.alpha" in fb.message
    assert fb.candidate.source == BAD_SYNTAX and fb.candidate.origin.strategy == "llm"
    # The loop feeds the failure back: the next prompt carries the evidence.
    with OpenAIDouble([Answer(block(GOOD))]) as srv:
        proposer(srv, sleeps).propose(make_request(history=tuple(p.last_failures), round_=1))
    user = srv.requests[0].body["messages"][-1]["content"]
    assert "syntax_error" in user and fb.message in user and BAD_SYNTAX.rstrip() in user


def test_empty_and_malformed_answers_give_failures(sleeps):
    no_model_new = block("import torch\nprint('hi')\n")
    with OpenAIDouble([Answer(""), Answer("Sorry, I can't."), Answer(no_model_new), Malformed()]) as srv:
        p = proposer(srv, sleeps)
        assert p.propose(make_request(samples=4)) == []
    assert [f.status for f in p.last_failures] == ["empty"] * 4
    assert "ModelNew" in p.last_failures[2].message
    assert "could not be read" in p.last_failures[3].message
    assert p.transcript[3].error.startswith("malformed response")
    assert len(srv.requests) == 4 and sleeps == []  # malformed bodies are not retried


# ---- retries ------------------------------------------------------------------------------


def test_429_then_success_honours_retry_after(sleeps):
    with OpenAIDouble([Status(429, {"Retry-After": "7"}), Answer(block(GOOD))]) as srv:
        p = proposer(srv, sleeps)
        cands = p.propose(make_request())
    assert len(cands) == 1 and len(srv.requests) == 2
    assert sleeps == [7.0]


def test_5xx_then_success_backs_off_exponentially(sleeps):
    with OpenAIDouble([Status(500), Status(503), Answer(block(GOOD))]) as srv:
        p = proposer(srv, sleeps, backoff_s=1.5)
        cands = p.propose(make_request())
    assert len(cands) == 1 and len(srv.requests) == 3
    assert sleeps == [1.5, 3.0]


def test_timeout_then_success(sleeps):
    with OpenAIDouble([Delay(3.0), Answer(block(GOOD))]) as srv:
        p = proposer(srv, sleeps, timeout_s=0.5)
        cands = p.propose(make_request())
    assert [c.source for c in cands] == [GOOD]
    assert len(srv.requests) == 2 and len(sleeps) == 1


def test_retries_exhausted_is_an_error_not_a_failure(sleeps):
    with OpenAIDouble([Status(503)] * 3 + [Answer(block(GOOD))]) as srv:
        p = proposer(srv, sleeps, max_retries=2)
        assert p.propose(make_request()) == []
    assert len(srv.requests) == 3 and len(sleeps) == 2
    assert p.last_failures == [] and len(p.last_errors) == 1 and "503" in p.last_errors[0]
    assert p.transcript[0].error is not None and p.transcript[0].answer is None


def test_400_is_not_retried(sleeps):
    with OpenAIDouble([Status(400), Answer(block(GOOD))]) as srv:
        p = proposer(srv, sleeps)
        assert p.propose(make_request()) == []
    assert len(srv.requests) == 1 and sleeps == [] and len(p.last_errors) == 1


# ---- budget -------------------------------------------------------------------------------


def test_budget_exhausted_before_any_request(sleeps):
    with OpenAIDouble([Answer(block(GOOD))]) as srv:
        p = proposer(srv, sleeps, max_total_tokens=100)  # less than the prompt alone
        with pytest.raises(BudgetExhausted):
            p.propose(make_request())
    assert srv.requests == []


def test_budget_spent_mid_round_keeps_bought_candidates(sleeps):
    prompt = sum(len(m["content"]) for m in build_messages(make_request())) // 4 + 1
    with OpenAIDouble([Answer(block(GOOD), prompt_tokens=prompt, completion_tokens=500)] * 3) as srv:
        p = proposer(srv, sleeps, max_total_tokens=2 * prompt + 100)
        cands = p.propose(make_request(samples=3))
        assert len(cands) == 1 and len(srv.requests) == 1
        with pytest.raises(BudgetExhausted):
            p.propose(make_request(samples=3, round_=1))
        assert len(srv.requests) == 1


def test_cost_budget(sleeps):
    with OpenAIDouble([Answer(block(GOOD), prompt_tokens=1_000_000, completion_tokens=0)] * 2) as srv:
        p = proposer(srv, sleeps, pricing=LlmPricing(price_per_mtok_in=2.0, max_cost_usd=1.0))
        p.propose(make_request())
        with pytest.raises(BudgetExhausted):
            p.propose(make_request())
    assert p.cost_usd == pytest.approx(2.0) and len(srv.requests) == 1


# ---- secrets ------------------------------------------------------------------------------


def test_api_key_never_logged_or_written(sleeps, caplog, tmp_path):
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {FAKE_KEY}"}})
    transcript = tmp_path / "llm" / "transcript.jsonl"
    script = [
        Status(500, body=echo),
        Status(429, {"Retry-After": "1"}, body=echo),
        Answer(f"The key is {FAKE_KEY}\n" + block(GOOD), reasoning=f"Bearer {FAKE_KEY}"),
        Malformed(),
        Status(401, body=echo),
    ]
    caplog.set_level(logging.DEBUG)
    with OpenAIDouble(script) as srv:
        p = proposer(srv, sleeps, stream=False, transcript_path=transcript)
        assert len(p.propose(make_request(samples=2))) == 1
        with pytest.raises(LlmError) as err:
            p.propose(make_request(round_=1))
    assert all(r.headers["authorization"] == f"Bearer {FAKE_KEY}" for r in srv.requests)
    assert "401" in str(err.value) and FAKE_KEY not in str(err.value)
    assert caplog.records and FAKE_KEY not in caplog.text
    assert all(FAKE_KEY not in r.getMessage() for r in caplog.records)
    assert FAKE_KEY not in repr(p.transcript) and "[REDACTED]" in repr(p.transcript)
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert transcript in files and len(transcript.read_text().splitlines()) == 3
    assert all(FAKE_KEY not in f.read_text() for f in files)
    assert all(FAKE_KEY not in json.dumps(e.to_json()) for e in p.transcript)


def test_redact():
    assert redact(f"x {FAKE_KEY} y") == "x [REDACTED] y"
    assert redact("Authorization: Bearer abc.def") == "Authorization: Bearer [REDACTED]"
    assert redact("token hunter2 here", ["hunter2"]) == "token [REDACTED] here"
    assert redact("task-abcdefghijkl stays") == "task-abcdefghijkl stays"


# ---- prompt -------------------------------------------------------------------------------


def feedback(status: str, message: str, round_: int, **kw) -> Feedback:
    cand = CandidateSource(f"c{round_}", GOOD, Origin("llm", detail="sample 0", round=round_))
    return Feedback(candidate=cand, status=status, message=message, **kw)


def test_prompt_has_hardware_floor_sources_contract():
    system, user = (m["content"] for m in build_messages(make_request()))
    for number in (
        "132 SMs",
        "60 MB L2",
        "228 KB shared memory per SM",
        "4800 GB/s",
        "989 TFLOP/s bf16",
        "67 TFLOP/s fp32",
        "9.0",
    ):
        assert number in system
    assert "class ModelNew(torch.nn.Module)" in system and "same constructor signature" in system
    for rule in (
        "No other CUDA streams",
        "No threads",
        "No caching of outputs",
        "lower precision",
        "falling back to the reference",
        "must not read files",
    ):
        assert rule in system
    assert "ONE ```python block" in system
    assert "1.75 µs" in user and "ops/leaky.py" in user and "odd {'N': 1000003}" in user
    assert REFERENCE.rstrip() in user and CURRENT.rstrip() in user
    assert "elem_rtol=1e-05" in user and "float64" in user
    unknown = build_messages(make_request(floor_us=None))[1]["content"]
    assert "floor of the main shape: unknown" in unknown


def test_prompt_example_follows_backend():
    triton_sys = build_messages(make_request(backend="triton"))[0]["content"]
    cuda_sys = build_messages(make_request(backend="cuda"))[0]["content"]
    assert "@triton.jit" in triton_sys and "load_inline" not in triton_sys
    assert "load_inline(" in cuda_sys and "cuda_sources=" in cuda_sys
    assert "cpp_sources=" in cuda_sys and "functions=[" in cuda_sys
    assert "import triton" not in cuda_sys and "@triton.jit" not in cuda_sys
    with pytest.raises(ValueError):
        build_messages(make_request(backend="cutlass"))


def test_prompt_feedback_evidence_newest_last():
    history = (
        feedback("compile_error", 'kernel.cu(12): error: identifier "foo" is undefined', 0),
        feedback("rejected", "no_caching: second call returned the first call's output", 1),
        feedback("accepted", "", 2, speedup=2.5, median_us=12.0, baseline_us=30.0, floor_us=6.0),
    )
    user = build_messages(make_request(history=history))[1]["content"]
    i0 = user.index('kernel.cu(12): error: identifier "foo" is undefined')
    i1 = user.index("no_caching: second call returned")
    i2 = user.index("12.00 µs vs baseline 30.00 µs (speedup 2.50x)")
    assert i0 < i1 < i2
    assert "roofline floor 6.00 µs, 50% of speed-of-light" in user
    assert "compile_error" in user and "rejected" in user and "round 1" in user


def test_feedback_is_capped_keeping_the_newest():
    history = tuple(feedback("runtime_error", f"Traceback #{i}\n" + "x" * 3000 + f"\nEND{i}", i) for i in range(20))
    text = format_feedback(history, max_chars=8000)
    assert len(text) <= 8000 + 200
    assert "END19" in text and "Traceback #0\n" not in text
    assert "older attempt(s) omitted" in text and "chars omitted" in text
    assert text.index("END18") < text.index("END19")
    user = build_messages(make_request(history=history), max_feedback_chars=8000)[1]["content"]
    assert len(user) < len(REFERENCE) + len(CURRENT) + len(GOOD) + 8000 + 2000


def test_transport_errors_do_not_leak_openai_retries(sleeps):
    """The client itself must not retry (max_retries=0): our loop counts every attempt."""
    with OpenAIDouble([Status(503), Answer(block(GOOD))]) as srv:
        p = proposer(srv, sleeps, max_retries=0)
        assert p.propose(make_request()) == []
    assert len(srv.requests) == 1 and isinstance(p.client, openai.OpenAI)
    assert p.client.max_retries == 0


def test_prompt_describes_the_gpu_the_job_runs_on():
    from bot.propose.base import hardware_for

    h100 = build_messages(make_request(hardware=hardware_for("NVIDIA H100 80GB HBM3")))[0]["content"]
    assert "NVIDIA H100 SXM" in h100 and "3350 GB/s" in h100 and "50 MB L2" in h100
    assert "H200" not in h100 and "4800 GB/s" not in h100
    assert "114 SMs" in build_messages(make_request(hardware=hardware_for("NVIDIA H100 PCIe")))[0]["content"]
    # A device with no known ceilings is named, never described with another GPU's figures.
    other = build_messages(make_request(hardware=hardware_for("NVIDIA RTX 6000 Ada Generation")))[0]["content"]
    assert "## Hardware\nNVIDIA RTX 6000 Ada Generation." in other and "SMs" not in other
