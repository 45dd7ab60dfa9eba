"""Outputs compared where they lie (ops "lend" and "judge", and a contender's trial written into
lent blocks): for shapes whose outputs would take too long through the channel and the bot's
memory (KernelBench's 19_ReLU: 6 GiB a call, 12 GiB of float64 reference).

The reference keeps its latest call's outputs (`Run.send_up_to`: a trial's, or a timed call's the
parent picked), lends a contender fresh poisoned blocks for one call (bot.harness.blocks), bound
to those outputs, and compares what the contender wrote there with the bot's own comparison
(bot.protocol.values), by the rule the bot sends. Only
the reference's process, which runs no candidate code, decides; the contender's process only
writes bytes into memory it was lent, as it would send them over the channel.

A part of bot.harness.worker.Harness, kept apart for size as bot/harness/checked.py is.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import torch

from bot.core.tolerance import rule_from_wire
from bot.harness import shared
from bot.harness.blocks import Block, borrow, lend
from bot.protocol.channel import Channel, close_fds
from bot.protocol.measures import output_nbytes
from bot.protocol.messages import Judge, JudgeReply, Lend, LendReply
from bot.protocol.typed import Failure
from bot.protocol.values import compare_values


@dataclass(frozen=True)
class Loan:
    """Blocks lent for one call's outputs, and the reference's outputs they are compared with."""

    blocks: list[Block]
    expected: list[torch.Tensor]
    meta: list[dict[str, Any]]

    def close(self) -> None:
        for block in self.blocks:
            block.close()


class JudgedCalls:
    """The reference's ops "lend" and "judge"; a contender's side is `write_into`."""

    device: str
    ch: Channel
    # The reference's: its latest kept outputs (as it would have sent them) and their metadata
    # in the problem's own dtypes; by token, the blocks it has lent and the outputs they are
    # compared with (a later call's kept outputs replace the latest, never a token's: the
    # parent lends for several picked timed calls before it judges); descriptors for the reply.
    expected: list[torch.Tensor] | None
    expected_meta: list[dict[str, Any]]
    lent: dict[str, Loan]
    outgoing_fds: list[int]

    def keep(self, values: list[torch.Tensor], metas: list[dict[str, Any]]) -> None:
        self.expected, self.expected_meta = values, metas

    def forget(self) -> None:
        """The latest kept outputs go (before the next call's are computed); a token's stay
        until it is judged."""
        self.expected, self.expected_meta = None, []

    def forget_lent(self) -> None:
        """Every lent block and the outputs bound to it go (on release)."""
        self.forget()
        for loan in self.lent.values():
            loan.close()
        self.lent.clear()

    def op_lend(self, msg: Lend) -> dict:
        if self.expected is None:
            return Failure("protocol", "lend: no outputs kept to compare with").to_wire()
        sizes = [output_nbytes(m) for m in self.expected_meta]
        blocks: list[Block] = []
        try:
            for size in sizes:
                block, fd = lend(size, self.device)
                blocks.append(block)
                self.outgoing_fds.append(fd)
        except Exception as exc:
            for block in blocks:
                block.close()
            close_fds(self.take_outgoing())
            return shared.failure("problem", exc)
        token = secrets.token_hex(8)
        self.lent[token] = Loan(blocks, self.expected, self.expected_meta)
        if msg.alone:
            self.forget()
        return LendReply(token=token, sizes=sizes).to_wire()

    def op_judge(self, msg: Judge) -> dict:
        loan = self.lent.pop(msg.token, None)
        if loan is None:
            return Failure("protocol", f"judge: no blocks lent as {msg.token!r}").to_wire()
        try:
            results = []
            if msg.compare:
                for i, (rule, label) in enumerate(zip(msg.rules, msg.labels)):
                    meta = loan.meta[i]
                    got = loan.blocks[i].view(getattr(torch, meta["dtype"]), meta["shape"])
                    result = compare_values(loan.expected[i], got, meta["dtype"], rule_from_wire(rule), label)
                    results.append(result.to_json())
        except Exception as exc:
            return shared.failure("problem", exc)
        finally:
            loan.close()
        return JudgeReply(results=results).to_wire()

    def take_outgoing(self) -> list[int]:
        fds, self.outgoing_fds = self.outgoing_fds, []
        return fds


def write_into(device: str, fds: list[int], sizes: list[int], outputs: list[torch.Tensor]) -> bool:
    """A contender's outputs copied into the blocks lent for them, where each fits its block as
    the reference's output does (else nothing is written, and the bot fails the call on its
    structure). The blocks are unmapped after; the caller closes the descriptors."""
    if len(fds) != len(sizes):
        raise ValueError(f"{len(sizes)} blocks named, {len(fds)} descriptors came")
    blocks: list[Block] = []
    try:
        for fd, size in zip(fds, sizes):
            blocks.append(borrow(fd, size, device))
        fits = len(outputs) == len(blocks) and all(
            out.numel() * out.element_size() == block.nbytes for out, block in zip(outputs, blocks)
        )
        if fits:
            for out, block in zip(outputs, blocks):
                block.view(out.dtype, list(out.shape)).copy_(out)
            if device == "cuda":
                shared.cuda_sync()
        return fits
    finally:
        for block in blocks:
            block.close()
