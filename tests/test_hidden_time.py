"""Hidden time (bot.engine.timing.hidden): what the parent's clock saw beyond a worker's report,
rejected when gross, counted into the samples when it stands out of the noise the contender
cannot touch, and the window's part judged apart from the staging's."""

from __future__ import annotations

import random
from types import SimpleNamespace

from bot.core.stats import speedup
from bot.engine.timing.hidden import (
    check_hidden_time,
    counted_within_gain,
    counts_within_gain,
    hidden_time,
    hidden_time_checks,
)
from bot.engine.timing.records import TimingRecord


def test_gross_hiding_rejects_and_less_is_counted_into_the_times():
    reported, harness, noise = [100.0] * 9, [40.0] * 9, [3.0] * 9
    honest = hidden_time([1.0, -2.0, 0.5, 3.0, -1.0, 2.0, 0.0, 1.5, -0.5], reported, harness, noise)
    assert check_hidden_time(honest, rejects=True).passed and honest.counted_us == 0.0
    # half the 100 us call, a quarter of the harness's 40 us, three times the noise of a median of nine
    assert 60.0 + 3 * 1.0 < honest.allowed_us < 60.0 + 3 * 2.5
    halved = hidden_time([100.0, 102.0, 99.0, 101.0, 100.0, 98.0, 103.0, 100.0, 100.0], reported, harness, noise)
    check = check_hidden_time(halved, rejects=True)
    assert not check.passed and check.details["hidden_us_per_call"] == 100.0 and "tampered" in check.evidence
    # Where the samples are the parent's own spans (the CPU) the same figure is evidence only.
    seen = check_hidden_time(halved, rejects=False)
    assert seen.passed and "100.0 us per call" in seen.evidence and "parent's own" in seen.evidence
    # A thin slice out of the calibration's noise: not rejected, counted into the times instead.
    shaved = hidden_time([5.0] * 9, reported, harness, noise)
    assert check_hidden_time(shaved, rejects=True).passed and shaved.counted_us == 5.0


def test_a_contender_cannot_widen_what_is_counted_by_scattering_its_batches():
    scattered = hidden_time(
        [0.0, 200.0, 40.0, 180.0, 40.0, 10.0, 190.0, 40.0, 40.0], [1000.0] * 9, [40.0] * 9, [3.0] * 9
    )
    assert scattered.noise_us > 10.0  # its own scatter widens the rejection bound ...
    assert scattered.counted_us == 40.0  # ... not what is counted


def test_candidates_are_held_to_the_baselines_unexplained_time_and_the_baseline_counts_nothing():
    def record(unexplained):
        return SimpleNamespace(
            unexplained_us=unexplained, reported_us=[100.0] * 6, harness_us=[40.0] * 6, noise_us=[2.0] * 6
        )

    found = hidden_time_checks(
        {"base": record([30.0] * 6), "twin": record([31.0, 29.0, 30.0, 32.0, 30.0, 28.0]), "cheat": record([55.0] * 6)},
        "base",
    )
    assert found["base"].hidden_us == 30.0 and found["base"].counted_us == 0.0
    assert abs(found["twin"].hidden_us) < 1.0 and found["twin"].counted_us == 0.0
    assert found["cheat"].hidden_us == 25.0 and found["cheat"].counted_us == 25.0
    assert hidden_time_checks({"x": record([])}, None) == {}


def test_a_baselines_heavy_first_small_batches_charge_a_twin_in_larger_ones_nothing():
    # On the H100 the first batches after a replica's capture are small and carry more of the
    # parent's time; through them alone a line fit falls with the batch size, and a twin timed
    # in larger batches was charged the fall per call (hundreds of us beside a 5 us call). Time
    # unexplained cannot shrink as calls are added: the fit's part per call is never negative.
    def record(sizes, heavy):
        totals = [(20_000.0 if i < heavy else 2_000.0) + (37 * i % 7) * 20 for i in range(len(sizes))]
        n = len(sizes)
        return SimpleNamespace(
            unexplained_us=[t / k for t, k in zip(totals, sizes)],
            reported_us=[5.0] * n,
            harness_us=[3.0] * n,
            noise_us=[1.0] * n,
            batch_sizes=sizes,
        )

    found = hidden_time_checks(
        {"base": record([1, 2, 3, 10, 12, 14], heavy=3), "twin": record([1, 40, 45, 50, 48, 44], heavy=1)}, "base"
    )
    assert found["twin"].counted_us < 50.0, found["twin"].details()
    assert found["twin"].hidden_us <= found["twin"].allowed_us, found["twin"].details()


# On an H100 (docs/evidence/h100-2026-12-06-aa-gelu-decode-graph-3-runs-spin-median.json.gz) a
# window's time beyond the harness's scattered by about 24 us a call and a worker's drawing of its
# own inputs, beyond the reference's drawing of as many, by about 700 us. Batches as few as a
# compute-bound call gets in a cap, of a 2.8 ms call:
SIZES = [3, 2, 4, 3, 5, 2, 4, 3]
WINDOW = [300.0, 312.0, 291.0, 305.0, 296.0, 318.0, 302.0, 287.0]
STAGING = [-900.0, 400.0, 2100.0, -1300.0, 600.0, 1500.0, -400.0, 900.0]
TWIN_STAGING = [1800.0, -200.0, 2600.0, 2300.0, 900.0, -1100.0, 1700.0, 1400.0]


def _drawn(window, staging):
    n = len(window)
    return SimpleNamespace(
        batch_sizes=SIZES[:n],
        unexplained_us=window,
        staging_us=staging,
        staging_noise_us=[60.0] * n,
        reported_us=[2800.0] * n,
        harness_us=[1500.0] * n,
        noise_us=[40.0] * n,
    )


def test_honest_copies_are_not_charged_what_scattered_staging_puts_between_their_medians():
    # Eight batches of staging that scatter by a millisecond put 1 ms between two medians of the
    # same code; counted into the copy's samples, that made it 1.4x slower than itself.
    found = hidden_time_checks({"base": _drawn(WINDOW, STAGING), "twin": _drawn(WINDOW[::-1], TWIN_STAGING)}, "base")
    twin = found["twin"]
    assert twin.counted_us == 0.0, twin.details()
    assert twin.staging_us > 900.0, twin.details()  # still named in the check's figures
    assert check_hidden_time(twin, rejects=True).passed, twin.details()


def test_a_clock_shaved_in_the_window_is_counted_apart_from_the_stagings_scatter():
    # 5 % of a 2.8 ms call taken off the report shows in the window's part, whose scatter is tens
    # of us; summed with the staging's, the count was whatever a millisecond of scatter made it.
    shaved = [w + 140.0 for w in WINDOW[::-1]]
    found = hidden_time_checks({"base": _drawn(WINDOW, STAGING), "shave": _drawn(shaved, TWIN_STAGING)}, "base")
    assert 110.0 < found["shave"].counted_us < 170.0, found["shave"].details()


def test_scattering_its_own_staging_does_not_raise_what_it_may_hide_there():
    # A third of the call computed while its inputs are drawn, and 3 ms more added to every other
    # batch's drawing: the bar to count is the baseline's scatter, which the contender cannot move.
    moved = [s + 930.0 + (3000.0 if i % 2 else 0.0) for i, s in enumerate(TWIN_STAGING)]
    found = hidden_time_checks({"base": _drawn(WINDOW, STAGING), "mover": _drawn(WINDOW[::-1], moved)}, "base")
    mover = found["mover"]
    assert mover.counted_us > 930.0 or not check_hidden_time(mover, rejects=True).passed, mover.details()


def test_a_count_goes_no_further_than_the_contenders_gain_over_the_baseline():
    assert abs(counted_within_gain(3_060.0, own_median_us=5.0, baseline_median_us=5.06) - 0.06) < 1e-9
    assert counted_within_gain(100.0, own_median_us=2_000.0, baseline_median_us=5_000.0) == 100.0  # within it
    assert counted_within_gain(100.0, own_median_us=6_000.0, baseline_median_us=5_000.0) == 0.0  # no gain at all
    assert counted_within_gain(100.0, own_median_us=6_000.0, baseline_median_us=None) == 100.0  # nothing to hold to


def _timed(call_us: float, staging_us: float, seed: int) -> TimingRecord:
    """Ten batches of CUDA figures: each call's event time near `call_us`, and a drawing of inputs
    `staging_us` a call beyond the reference's, both scattered as on the H100."""
    rng = random.Random(seed)
    record = TimingRecord()
    for n in (1, 2, 37, 38, 29, 50, 50, 30, 34, 40):
        record.samples_us.extend([call_us * rng.uniform(0.98, 1.02)] * n)
        record.batch_sizes.append(n)
        record.batch_workers.append(len(record.batch_sizes) % 2)
        record.unexplained_us.append(rng.uniform(-50.0, 50.0))
        record.staging_us.append(staging_us + rng.uniform(-20.0, 20.0))
        record.staging_noise_us.append(60.0)
        record.reported_us.append(call_us + 700.0)
        record.harness_us.append(300.0)
        record.noise_us.append(40.0)
    return record


def _charged(records: dict[str, TimingRecord]) -> dict[str, TimingRecord]:
    """What shape_run does on CUDA: counts held to each gain, then counted into the samples."""
    for name, found in counts_within_gain(records, hidden_time_checks(records, "base"), "base").items():
        records[name].counted_us = found.counted_us
    return records


def test_an_honest_copy_charged_its_drawings_noise_stays_the_baselines_twin():
    # On the H100 one of two copies of gelu's 5 us decode call drew its inputs 3 ms a call slower
    # than the baseline, in every batch: counted in full, the copy came out 45 to 600 times slower
    # than itself.
    records = _charged({"base": _timed(5.0, 0.0, 1), "copy": _timed(5.0, 3_000.0, 2)})
    assert hidden_time_checks(records, "base")["copy"].counted_us > 2_000.0  # what would have been counted
    ratio = speedup(records["base"].measurement(), records["copy"].measurement())
    assert 0.95 < ratio.ratio < 1.05 and ratio.significance == "no significant difference", ratio


def test_work_moved_into_the_drawing_is_charged_until_no_gain_is_left():
    # The defeating candidate: 80 % of a 1 ms call computed while it draws its inputs, so its
    # events show 200 us. Held to its gain, the count still takes all of it back: no claim.
    records = _charged({"base": _timed(1_000.0, 0.0, 1), "mover": _timed(200.0, 800.0, 3)})
    assert records["mover"].counted_us > 700.0, records["mover"].counted_us
    result = speedup(records["base"].measurement(), records["mover"].measurement())
    assert result.significance != "faster" and result.ratio < 1.05, result


def test_a_real_gain_keeps_what_is_counted_below_it():
    # Twice as fast, with 100 us of its 600 us a call moved into its drawing: all of it counted.
    records = _charged({"base": _timed(1_000.0, 0.0, 1), "faster": _timed(500.0, 100.0, 4)})
    result = speedup(records["base"].measurement(), records["faster"].measurement())
    assert 1.6 < result.ratio < 1.75, result


def test_two_spiked_batches_are_charged_in_full_not_called_tampering_and_three_are():
    # KernelBench's 11_4D_tensor_matrix_multiplication on the H100: the torch.compile default
    # build's two screening batches each had a 26 to 30 ms spike in the drawing of its inputs
    # (18.5 ms calls), as a fifth of every contender's batches did; two are a spike's median.
    reported, harness, noise = [18_500.0] * 3, [42_000.0] * 3, [900.0] * 3
    two = hidden_time([28_000.0, 27_000.0], reported[:2], harness[:2], noise[:2])
    check = check_hidden_time(two, rejects=True)
    assert check.passed and "in 2 batch(es), too few to tell" in check.evidence, check.evidence
    assert two.counted_us == two.hidden_us == 27_500.0  # all of it charged, not what stands out
    # Charged up to its gain, it is no faster than the baseline: hiding in two batches pays nothing.
    assert counted_within_gain(two.counted_us, 12_000.0, 18_500.0) == 6_500.0
    three = hidden_time([28_000.0, 27_000.0, 27_500.0], reported, harness, noise)
    assert not check_hidden_time(three, rejects=True).passed
    # Within the bound two batches are as any: nothing more charged.
    calm = hidden_time([100.0, -100.0], reported[:2], harness[:2], noise[:2])
    assert check_hidden_time(calm, rejects=True).passed and calm.counted_us == 0.0
