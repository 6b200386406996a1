"""The frontier report's ratios between families: each divides costs of one pair of sizes.

A family's cost on each axis is its cheapest size on that axis, so the seconds row and the steps
row may pair different sizes; the time a step takes is read off one pair."""

import pytest

from seq2seq.compare import cost
from seq2seq.compare.frontier import read_records
from seq2seq.compare.frontier_report import _cost_section, frontier_data
from tests.conftest import REPO
from tests.test_frontier import GPU, _timed

# Points are (step, training minutes, FLOPs, BLEU, validation minutes); two seeds a size, the
# same curve. At validation 35 transformer-small is the Transformer's cheapest size in seconds
# (2 minutes against medium's 3) and in FLOPs, transformer-medium its cheapest in steps (200
# against small's 400): RNNsearch's 4 minutes and 800 steps are 2 times small's seconds and 4
# times medium's steps, but 2 times small's steps too, so a step of each takes the same time.
CURVES = {
    "transformer-small": [(200, 1.0, 2e12, 30.0, 0.1), (400, 2.0, 4e12, 35.5, 0.2)],
    "transformer-medium": [(100, 1.5, 4e12, 30.0, 0.1), (200, 3.0, 8e12, 35.5, 0.2)],
    "rnnsearch-medium": [(400, 2.0, 3e12, 30.0, 0.1), (800, 4.0, 6e12, 35.5, 0.2)],
}
RUNS = [
    _timed(f"{size}-seed{seed}", size.split("-")[0], curve)
    for size, curve in CURVES.items()
    for seed in (0, 1)
]


def test_seconds_over_steps_divides_the_ratios_of_one_pair_of_sizes():
    data = frontier_data(RUNS, "made up", "latest")
    top = data["first_in_time"][0]
    assert top["level"] == 35.0
    assert top["ratios"]["minutes"]["ratio"] == pytest.approx(2.0)  # against transformer-small
    assert top["ratios"]["step"]["ratio"] == pytest.approx(4.0)  # against transformer-medium
    (verdict,) = [line for line in _cost_section(data) if line.startswith("- At equal")]
    assert verdict == (
        f"- At equal training time on {GPU}, `transformer` gets there first at every stated "
        "level: to validation BLEU 35, `rnnsearch` needs 2.00 [2.00, 2.00] times its training "
        "seconds (means 240 s against 120 s; validation by then, off the clock: 12 s and 12 s), "
        "1.50 [1.50, 1.50] times its training FLOPs and 4.00 [4.00, 4.00] times its steps "
        "(`rnnsearch-medium` against `transformer-medium`, the sizes cheapest in steps). Seconds "
        "over steps, on the sizes cheapest in seconds (`rnnsearch-medium` took 2.00 times the "
        "steps of `transformer-small`): a step of `rnnsearch` took 1.00 times one of "
        "`transformer` (for "
        "runs that shared a device, `python -m seq2seq.compare.sharing` says how much of that "
        "the sharing made)."
    )  # the seconds ratio over the steps row's would say 0.50
    assert top["per_step"] == {
        "sizes": {"rnnsearch": "rnnsearch-medium", "transformer": "transformer-small"},
        "steps_row_sizes": {"rnnsearch": "rnnsearch-medium", "transformer": "transformer-medium"},
        "steps_ratio": pytest.approx(2.0),
        "ratio": pytest.approx(1.0),
    }


TUNED = REPO / "docs" / "records" / "multi30k_frontier_tuned"


@pytest.mark.skipif(not TUNED.is_dir(), reason="docs/records/multi30k_frontier_tuned absent")
def test_a_step_of_each_family_in_the_committed_tuned_frontier():
    """What docs/results.md says of the CPU seeds at validation 40: rnnsearch-medium needs 1.96
    times transformer-small's training seconds and 1.87 times its steps, so a step took 1.05
    times as long (the steps row's 2.22 is against transformer-medium)."""
    from seq2seq.compare.frontier_report import _time_per_step

    runs = read_records(TUNED, None, "average:5")
    rows = cost.cost_to_levels(runs, ["rnnsearch", "transformer"])
    top = cost.first_in_time(rows)[0]
    assert top["level"] == 40.0
    assert top["ratios"]["step"]["ratio"] == pytest.approx(2.22, abs=0.005)
    per_step = _time_per_step(runs, rows, top)
    assert per_step["sizes"] == {
        "rnnsearch": "rnnsearch-medium",
        "transformer": "transformer-small",
    }
    assert per_step["steps_ratio"] == pytest.approx(1.87, abs=0.005)
    assert per_step["ratio"] == pytest.approx(1.05, abs=0.005)
