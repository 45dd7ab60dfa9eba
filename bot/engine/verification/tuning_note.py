"""The line that says a tuning contender held the GPU to itself (bot.harness.tuning_gate): every
other trial and timing on the device waits that hold out, so a run names who held it and for
how long, by the bot's clock, with what the worker says it spent timing kernel variants in it
(quoted as its account: it decides nothing)."""

from __future__ import annotations

ALONE_NOTE_S = 5.0  # a tuning contender's hold on the GPU alone worth a line (> 0: a call never granted held none)


def alone_note(who: str, alone_s: float, call_s: float, account: list[float] | None) -> str | None:
    """The note for a call of `call_s` whose contender `who` held the GPU alone for `alone_s`,
    where that is ALONE_NOTE_S or more; `account`: the worker's [first timing began, last
    ended, how many], seconds from the call's start, or None."""
    if alone_s < ALONE_NOTE_S:
        return None
    line = (
        f"{who} timed its kernel variants with the GPU to itself for {alone_s:.0f} s of its {call_s:.0f} s "
        "call: other work on this GPU waited meanwhile"
    )
    if account is None:
        return line
    first, last, count = (min(max(x, 0.0), 1e9) for x in account)
    return f"{line}; by its own account it timed {count:.0f} variant(s) from {first:.0f} s to {last:.0f} s of the call"
