"""Shared fixtures: paths, a CPU evaluation helper, and the GPU/docker markers' skips."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
PROBLEMS = FIXTURES / "problems"
CANDIDATES = FIXTURES / "candidates"

# Tests run in parallel processes (pytest-xdist) assert no timing claim: those are marked `timing`
# and run alone, under the one lock folder every bot process of the user shares. Each parallel
# process gets a lock folder of its own (bot.engine.workers.gpulock.lock_folder), so that one
# test's trial that hangs until the stall bound (60 s, holding the lock shared) does not hold up
# every other process's timing behind it: with one shared folder, tests of 3 to 9 s took 56 to 63 s.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="kernel-bot-test-locks-")


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200: see docs/verifier.md)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def quick_options():
    """Evaluation options sized for CPU tests: short timing, strict call timeouts."""
    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.timing.records import TimingOptions
    from bot.sandbox import Limits

    def make(**overrides):
        limits = overrides.pop(
            "limits", Limits(memory_mb=4096, import_timeout_s=120, construct_timeout_s=60, call_timeout_s=20)
        )
        timing = overrides.pop("timing", TimingOptions(time_cap_s=0.5, min_samples=5))
        cache_root = overrides.pop(
            "cache_root", Path(os.environ.get("KERNEL_BOT_TEST_CACHE", "/tmp/kernel-bot-test-cache"))
        )
        use_cache = overrides.pop("use_cache", False)  # a test of the cache says so
        return EvalOptions(
            device="cpu", use_cache=use_cache, limits=limits, timing=timing, cache_root=cache_root, **overrides
        )

    return make


def typed(doc: dict):
    """A results dict as the typed document the renderers take, without the schema check:
    report fixtures are partial documents (bot.core.results.Results.from_json validates)."""
    from bot.core.domain import Trigger
    from bot.core.results import ProblemResult, Results

    trigger = doc.get("trigger")
    return Results(
        tuple(ProblemResult.from_json(p) for p in doc.get("problems") or ()),
        Trigger.from_json(trigger) if trigger else None,
        doc.get("min_speedup"),
        doc.get("created"),
    )
