"""The timed calls the parent picks, where their outputs are too large to reveal over the
channel (a CUDA shape over HarnessCost.FULL_CHECK_BYTES: KernelBench's 19_ReLU, 6 GiB a call):
compared in full where they lie, by the reference, as a trial's large outputs are
(bot.engine.verification.expected).

For each pick the reference computes the call's outputs from its seed, keeps them and lends
blocks bound to them; the contender writes the picked call's outputs, as it kept them from the
batch, into the blocks; the reference compares them with the rule the parent sends. The call's
commitment inside the window (its fingerprint, against the reference's of the same outputs)
still binds what it writes after the batch to what it computed in the window, to the normwise
bound a fingerprint holds (docs/verifier.md, "Timed calls")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.core.domain import CheckResult
from bot.core.tolerance import Rule, rules_of
from bot.engine.verification.compare import as_timed_call
from bot.engine.verification.expected import Lent, judge, lend
from bot.engine.workers.client import WorkerClient, WorkerFailure, ask
from bot.protocol.channel import close_fds
from bot.protocol.messages import Run


@dataclass(frozen=True)
class LentPick:
    """One picked call's blocks (None where the reference could not lend) and the reference's
    fingerprints of its outputs, which the call's commitment is held to."""

    lent: Lent | None
    prints: list[Any]


@dataclass
class PickLending:
    """Whether picks are lent for: until the reference first fails to lend (no CUDA VMM), when
    `note` says why and picks are checked by their fingerprints alone, as before."""

    on: bool
    note: str = ""

    def lend(self, reference: WorkerClient, seeds: Sequence[int], fp_seed: int, timeout_s: float) -> list[LentPick]:
        """Blocks for each picked call's outputs, for every pick or (once lending fails, and
        lending turns off) for none: the reference's fingerprints of each either way. A
        failure of the problem's own code is the problem's (WorkerFailure, raised)."""
        picks: list[LentPick] = []
        try:
            for seed in seeds:
                keep = -1 if self.on else None  # kept in the reference, for the blocks it lends
                request = Run(seed=seed, want="fingerprint", fp_seed=fp_seed, send_up_to=keep)
                ran = ask(reference, request, timeout_s, "problem")
                lent = None
                if self.on:
                    try:
                        lent = lend(reference, timeout_s, alone=True)  # held no longer than judged
                    except WorkerFailure as exc:
                        self.on, self.note = False, f"timed calls' outputs checked by fingerprint alone: {exc.reason}"
                picks.append(LentPick(lent, ran.fingerprints))
        except BaseException:
            _unsent(reference, picks, timeout_s)
            raise
        if not self.on:
            _unsent(reference, picks, timeout_s)
            picks = [LentPick(None, p.prints) for p in picks]
        return picks

    @staticmethod
    def free(reference: WorkerClient, picks: Sequence[LentPick], timeout_s: float) -> None:
        for pick in picks:
            if pick.lent is not None:
                judge(reference, pick.lent, None, timeout_s)


def _unsent(reference: WorkerClient, picks: Sequence[LentPick], timeout_s: float) -> None:
    """Blocks lent for picks that will not be sent: the bot's descriptors closed (each would keep
    its block's memory for the bot's whole run), then the reference frees them."""
    close_fds([fd for pick in picks if pick.lent is not None for fd in pick.lent.fds])
    PickLending.free(reference, picks, timeout_s)


def sizes_and_fds(picks: Sequence[LentPick]) -> tuple[list[int] | None, list[int]]:
    """What the contender's `Outputs` names and carries: every lent block, pick after pick
    (None where nothing was lent)."""
    lent = [p.lent for p in picks if p.lent is not None]
    if not lent:
        return None, []
    return [s for blocks in lent for s in blocks.sizes], [fd for blocks in lent for fd in blocks.fds]


def judged(
    reference: WorkerClient,
    pick: LentPick,
    committed: CheckResult,
    dtypes: Sequence[str],
    rules: Sequence[Rule | None],
    label: str,
    timeout_s: float,
) -> list[CheckResult]:
    """The reference's verdict on what the contender wrote into one pick's blocks, each output
    by its rule (REUSED_OUTPUT where its commitment had matched)."""
    assert pick.lent is not None
    labels = [label if len(dtypes) == 1 else f"{label}, output {i}" for i in range(len(dtypes))]
    results = judge(reference, pick.lent, list(zip(rules_of(dtypes, rules), labels)), timeout_s)
    return [as_timed_call(r, label, committed) for r in results]
