"""The parent's account of the outputs a worker holds across batches (bot.engine.timing.outside_checks):
which held call an output's memory overlaps, and forgetting calls as the worker lets them go
(bot.harness.held)."""

from __future__ import annotations

import torch

from bot.engine.timing.outside_checks import HeldRegions, _aliasing
from bot.harness.held import Held, span, where


def test_an_overlap_names_the_held_call_and_touching_spans_do_not_overlap():
    held = HeldRegions()
    held.add(1, [(1000, 1100), (2000, 2040)])
    held.add(2, [(1100, 1200)])
    assert held.find(1050, 1060) == 1
    assert held.find(1199, 1300) == 2
    assert held.find(900, 1001) == 1
    assert held.find(2040, 2100) is None  # [start, end): 2040 is free
    assert held.find(1200, 2000) is None
    assert held.find(0, 10_000) is not None  # a span covering held ones


def test_trimming_forgets_the_oldest_calls_as_the_worker_does():
    held, worker = HeldRegions(), Held()
    for call in range(1, 6):
        held.add(call, [(call * 100, call * 100 + 50)])
        worker.keep([[torch.zeros(1)]], 3)
        held.trim(3)
    assert len(worker.calls) == len(held.calls) == 3
    assert held.find(100, 150) is None and held.find(200, 250) is None
    assert held.find(300, 350) == 3 and held.find(500, 501) == 5


def test_a_held_output_reused_and_an_output_in_an_input_are_aliasing():
    held = HeldRegions()
    held.add(7, [(5000, 5100)])
    found = _aliasing([[(5000, 100)]], [], held, 60, 1000)
    assert not found[0].passed and "timed call 7" in found[0].evidence and "timed call 60" in found[0].evidence
    found = _aliasing([[(9000, 100)]], [[[9050, 10]]], HeldRegions(), 1, 1000)
    assert "an input of the batch" in found[0].evidence
    found = _aliasing([[(9000, 100)], [(9000, 100)]], [], HeldRegions(), 1, 1000)
    assert "an output of timed call 1" in found[0].evidence
    assert _aliasing([[(9000, 100)], [(9100, 100), (1, 0)]], [[[8000, 1000]]], held, 1, 1000) == []


def test_a_strided_output_spans_from_its_first_to_its_last_element():
    base = torch.zeros(8, 16)
    view = base[:, 2:6]  # 8 rows of 4, 16 apart
    assert span(view) == [view.data_ptr(), ((7 * 16 + 3) + 1) * 4]
    spans, strides = where([view, torch.zeros(0)])
    assert strides == [[16, 1], [1]] and spans[1][1] == 0
