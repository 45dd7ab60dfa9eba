"""Verdicts and timings of candidates judged before, kept so that they are not judged again.

A candidate the bot has already judged against the same problem and baseline, on the same
machine stack and under the same protocol, is not compiled, verified and timed again (LLM
rounds often repeat a candidate; nightly sweeps repeat the search). The cache keeps verdicts,
not luck: an outcome is kept, and reused, only where it is a conclusion (bot.core.conclusive:
a rejection on what the code computes, or an interval wholly on one side of min-speedup); an
inconclusive interval or a rejection a busy machine can cause is measured again.

- **Key** (the entry's file name): the problem's source, the baseline's and the candidate's
  source hashes and class, and the machine stack (device, GPU and driver, torch, CUDA, triton).
- **Protocol** (in the entry; another protocol is a miss): a hash of the bot's own judging and
  timing code (`PROTOCOL_PACKAGES`), and every evaluation option except those that only say
  how long or where to work (`HOW_LONG`): timing mode, replicas, min-speedup, batch sizes,
  checks per batch, trials, threads, sandbox, and any option added later.
- **Entry**: a results.json document with one attempt, read back through the one reader of
  results (bot.core.results.Results.from_json, schema-validated).
- **Where**: `$XDG_CACHE_HOME/kernel-bot` (else `~/.cache/kernel-bot`: the default of
  `EvalOptions.cache_root`, bot.engine.evaluation.options), folders of mode 0700
  owned by the user; a results folder another user owns is not used.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import platform
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.core.conclusive import conclusion
from bot.core.domain import CandidateSource, Problem, source_hash, source_sha256
from bot.core.errors import BotError
from bot.core.judge import Thresholds, judge, problem_outcome
from bot.core.outcomes import ContenderOutcome
from bot.core.results import ProblemResult, Results
from bot.core.results_contenders import BestResult, ContenderResult
from bot.core.results_outcomes import contender_outcome
from bot.core.settings import Device
from bot.engine.evaluation.options import EvalOptions

log = logging.getLogger(__name__)

ENTRY_KIND = "kernel-bot-cached-outcome"
BOT_PACKAGE = Path(__file__).resolve().parents[2]  # bot/
# The bot's code that verifies and times: a change to any of it may change a verdict or a time.
PROTOCOL_PACKAGES = ("core", "engine", "harness", "protocol", "sandbox")
# Options that say how long or where to work, not what a verdict or a time means. Everything
# else, including options added later, is part of the protocol. A shorter time cap gives a
# wider interval, which the conclusion rule reads; it does not change what the interval means.
HOW_LONG = frozenset(
    {
        "cache_root",
        "use_cache",
        "parallel",
        "beside_others",
        "gpu_index",
        "limits",
        "time_cap_s",
        "target_rel_se",
        "min_samples",
        "min_batches",
        "finalists",
    }
)


def private_folder(path: Path) -> bool:
    """`path` a folder only this user may enter: made with mode 0700 where missing, tightened
    to 0700 where the user owns it; False where it is a link or another user's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return False
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return True


@functools.cache
def code_hash(root: Path = BOT_PACKAGE) -> str:
    """sha256 of the judging and timing code (`PROTOCOL_PACKAGES` of the package at `root`),
    file names included."""
    digest = hashlib.sha256()
    for package in PROTOCOL_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Protocol:
    """What a verdict or a time was measured under (see the module's docstring)."""

    code: str  # code_hash()
    settings: str  # the options that matter, as canonical JSON

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.code}\n{self.settings}".encode()).hexdigest()


def _meaning(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _meaning(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name not in HOW_LONG}
    return value


def protocol_of(options: EvalOptions) -> Protocol:
    return Protocol(code_hash(), json.dumps(_meaning(options), sort_keys=True, default=str))


def environment_key(device: str, gpu_index: int | None) -> str:
    """Identity of the machine stack, read without starting CUDA in the bot's process."""
    import torch

    parts = [device, torch.__version__, torch.version.cuda or ""]
    try:
        from importlib.metadata import version

        parts.append(version("triton"))
    except Exception:
        parts.append("")
    if device == Device.CUDA:
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", f"--id={gpu_index or 0}"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            parts.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            parts.append("unknown-gpu")
    else:
        parts.append(platform.processor() or platform.machine())
    return "|".join(parts)


class ResultCache:
    """The conclusions under `root`/results for one machine stack and protocol; off (every
    lookup a miss, nothing kept) where that folder cannot be this user's alone."""

    def __init__(self, root: Path, env_key: str, protocol: Protocol, min_speedup: float):
        self.env_key = env_key
        self.protocol = protocol
        self.min_speedup = min_speedup
        folder = root / "results"
        try:
            private = private_folder(root) and private_folder(folder)
        except OSError as exc:
            log.warning("result cache not used: %s", exc)
            private = False
        else:
            if not private:
                log.warning("result cache not used: %s is not a folder of this user's alone", folder)
        self.folder: Path | None = folder if private else None

    def entry_path(self, problem: Problem, baseline: CandidateSource | None, candidate: CandidateSource) -> Path:
        key = source_hash(
            "\n".join(
                [
                    problem.source,
                    baseline.source_hash if baseline else "-",
                    candidate.source_hash,
                    candidate.class_name,
                    self.env_key,
                ]
            )
        )
        assert self.folder is not None
        return self.folder / problem.name / f"{key}.json"

    def get(
        self, problem: Problem, baseline: CandidateSource | None, candidate: CandidateSource
    ) -> ContenderOutcome | None:
        """The cached outcome where it is a conclusion measured under this protocol; else None."""
        if self.folder is None:
            return None
        path = self.entry_path(problem, baseline, candidate)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                entry = json.loads(fh.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable cache entry %s: %s", path, exc)
            return None
        if not isinstance(entry, dict) or entry.get("kind") != ENTRY_KIND:
            log.warning("ignoring cache entry %s: not a %s", path, ENTRY_KIND)
            return None
        if entry.get("protocol") != self.protocol.fingerprint:
            log.info("%s: cached under another protocol; measured again", candidate.name)
            return None
        try:
            attempt = Results.from_json(entry.get("results")).problems[0].attempts[0]
            if attempt.source_sha256 != source_sha256(candidate.source):
                raise ValueError("the entry is of another source")
            outcome = contender_outcome(attempt, candidate)
        except (BotError, ValueError, KeyError, TypeError, IndexError) as exc:
            log.warning("ignoring invalid cache entry %s: %s", path, exc)
            return None
        found = conclusion(outcome, self.min_speedup)
        if not found.conclusive:
            log.info("%s: cached outcome %s; measured again", candidate.name, found.why)
            return None
        return outcome

    def put(self, problem: Problem, baseline: CandidateSource | None, outcome: ContenderOutcome) -> None:
        """Keep `outcome` where it is a conclusion; drop an older entry where it is not."""
        if self.folder is None:
            return
        path = self.entry_path(problem, baseline, outcome.candidate)
        found = conclusion(outcome, self.min_speedup)
        if not found.conclusive:
            path.unlink(missing_ok=True)
            return
        entry = entry_document(problem, outcome, self.protocol, self.min_speedup)
        try:
            Results.from_json(entry["results"])  # only what the reader takes back is written
        except BotError as exc:
            log.warning("%s: not cached: %s", outcome.candidate.name, exc)
            return
        path.parent.mkdir(mode=0o700, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".", suffix=".tmp", delete=False) as fh:
            json.dump(entry, fh)
        os.replace(fh.name, path)


def entry_document(
    problem: Problem, outcome: ContenderOutcome, protocol: Protocol, min_speedup: float
) -> dict[str, Any]:
    """A cache entry: the protocol, and `outcome` as a results document with one attempt."""
    attempt = ContenderResult.of(outcome, 0, conclusion(outcome, min_speedup).why)
    verdict = judge(attempt, Thresholds(min_speedup))
    attempt = dataclasses.replace(attempt, significant=verdict.significant)
    best = BestResult.of(outcome) if verdict.claimed else None
    flags = (verdict.implausible,) if verdict.accepted and verdict.implausible is not None else ()
    word = problem_outcome(error=None, best=best, not_timed=outcome.not_timed, implausible=flags)
    entry = ProblemResult(
        problem.name, word, attempts=(attempt,), best=best, implausible=flags, min_speedup=min_speedup
    )
    return {
        "kind": ENTRY_KIND,
        "protocol": protocol.fingerprint,
        "settings": json.loads(protocol.settings),  # for a reader: what the protocol held
        "results": Results((entry,)).to_json(),
    }
