"""The cost of reaching a validation level, with intervals over seeds, on made-up runs."""

import math

import pytest
from scipy import stats

from seq2seq import config as config_lib
from seq2seq.compare import cost
from seq2seq.compare.frontier import Point, RunRecord


def _run(size: str, seed: int, bleus: list[float], flops_per_point: float) -> RunRecord:
    """A run validated every 100 steps, ``flops_per_point`` FLOPs apart, with these BLEUs."""
    family = size.split("-")[0]
    curve = tuple(
        Point(100 * (i + 1), float(i + 1), flops_per_point * (i + 1), bleu)
        for i, bleu in enumerate(bleus)
    )
    return RunRecord(
        name=f"{size}-seed{seed}",
        config_name=size,
        family=family,
        seed=seed,
        curve=curve,
        stop_reason="converged",
        steps=curve[-1].step,
        minutes=curve[-1].minutes,
        flops=curve[-1].flops,
        result={"bleu": 0.0},
        hypotheses=(),
        config=config_lib.default_config(),
    )


RUNS = [
    # rnnsearch-small reaches 30 at the 3rd, 4th and 5th points (10 FLOPs each): 30, 40, 50.
    _run("rnnsearch-small", 0, [10, 20, 31, 33, 32], 10.0),
    _run("rnnsearch-small", 1, [10, 20, 25, 30, 31], 10.0),
    _run("rnnsearch-small", 2, [10, 20, 25, 29, 30.5], 10.0),
    # rnnsearch-large gets there sooner in steps but at 40 FLOPs a point: 80 and 80.
    _run("rnnsearch-large", 0, [20, 30, 34], 40.0),
    _run("rnnsearch-large", 1, [25, 30.2, 33], 40.0),
    # transformer-small reaches 30 at 10 and 20 FLOPs; one of its seeds never reaches 33.
    _run("transformer-small", 0, [30, 33.5], 10.0),
    _run("transformer-small", 1, [29, 31, 32], 10.0),
]


def test_each_seed_pays_up_to_its_first_point_at_the_level():
    rows = {row["size"]: row for row in cost.size_costs(RUNS, 30.0)}
    assert rows["rnnsearch-small"]["costs"] == [30.0, 40.0, 50.0]
    assert rows["rnnsearch-large"]["costs"] == [80.0, 80.0]
    assert rows["transformer-small"]["costs"] == [10.0, 20.0]
    # Student t with 2 degrees of freedom around the mean 40 (standard error 10/sqrt(3)).
    half = stats.t.ppf(0.975, 2) * 10 / math.sqrt(3)
    assert rows["rnnsearch-small"]["mean"] == pytest.approx(40.0)
    assert rows["rnnsearch-small"]["ci95"] == pytest.approx([40 - half, 40 + half])
    steps = {row["size"]: row["costs"] for row in cost.size_costs(RUNS, 30.0, "step")}
    assert steps["rnnsearch-large"] == [200.0, 200.0]


def test_a_family_pays_for_its_cheapest_size_that_every_seed_got_to():
    assert cost.family_cost(RUNS, "rnnsearch", 30.0)["size"] == "rnnsearch-small"  # 40 < 80
    assert cost.family_cost(RUNS, "rnnsearch", 30.0, "step")["size"] == "rnnsearch-large"
    assert cost.family_cost(RUNS, "transformer", 33.0) is None  # seed 1 peaked at 32
    partial = {row["size"]: row for row in cost.size_costs(RUNS, 33.0)}["transformer-small"]
    assert (partial["reached"], partial["costs"]) == (1, [20.0, None])


def test_a_size_with_one_seed_is_a_familys_cost_only_where_no_seeded_size_got_there():
    # transformer-large's one seed reaches 30 at 5 FLOPs, cheaper than transformer-small's two
    # seeds (10 and 20), but one seed has no interval: the two-seed size stands for the family.
    lone = _run("transformer-large", 0, [31], 5.0)
    assert cost.family_cost([*RUNS, lone], "transformer", 30.0)["size"] == "transformer-small"
    # At 33 only one transformer-small seed got there: the lone size is all the family has.
    high = _run("transformer-large", 0, [31, 34], 5.0)
    picked = cost.family_cost([*RUNS, high], "transformer", 33.0)
    assert (picked["size"], picked["costs"], picked["ci95"]) == ("transformer-large", [10.0], None)


def test_the_ratio_interval_resamples_each_sides_seeds():
    ratio, (low, high) = cost.ratio_interval([30.0, 40.0, 50.0], [10.0, 20.0], samples=4000)
    assert ratio == pytest.approx(40.0 / 15.0)
    # The extremes a resample can reach: 30/20 and 50/10; the interval lies inside, around it.
    assert 1.5 <= low < ratio < high <= 5.0
    same = cost.ratio_interval([20.0, 20.0], [10.0, 10.0], samples=100)
    assert same == (2.0, (2.0, 2.0))


def test_the_stated_levels_are_reached_by_every_seed_of_a_size_in_each_family():
    # rnnsearch-small's seeds peak at 33, 31 and 30.5 (its worst: 30.5), rnnsearch-large's at
    # 34 and 33 (33); transformer-small's at 33.5 and 32 (32): the highest level both reach is 32.
    assert cost.stated_levels(RUNS, ["rnnsearch", "transformer"]) == [32.0, 30.0, 28.0]
    rows = cost.cost_to_levels(RUNS, ["rnnsearch", "transformer"])
    at_30 = next(row for row in rows if row["level"] == 30.0 and row["axis"] == "flops")
    assert at_30["ratio"] == pytest.approx(40.0 / 15.0)
    assert at_30["side"] == "more"  # as at every level: the stated ones are decided alike


def test_the_budget_rule_counts_each_sizes_most_expensive_seed():
    rows = {row["size"]: row for row in cost.budget_rule(RUNS)}
    assert rows["rnnsearch-small"]["max_flops"] == 50.0
    assert rows["rnnsearch-small"]["max_over_mean"] == pytest.approx(1.0)  # all ran 5 points
    assert rows["transformer-small"]["mean_flops"] == pytest.approx(25.0)
    assert rows["transformer-small"]["max_over_mean"] == pytest.approx(30.0 / 25.0)


def test_the_family_first_in_time_and_what_the_other_pays_on_every_axis():
    # Made-up seconds: the runs' points are a minute apart; transformer-small reaches 30 at
    # minutes 1 and 2, rnnsearch-small at 3, 4 and 5 (and rnnsearch-large at 2 and 2, which is
    # RNNsearch's cheapest size in time and steps but not in FLOPs).
    rows = cost.cost_to_levels(RUNS, ["rnnsearch", "transformer"])
    verdicts = {v["level"]: v for v in cost.first_in_time(rows)}
    at_30 = verdicts[30.0]
    assert (at_30["leader"], at_30["other"]) == ("transformer", "rnnsearch")
    assert at_30["minutes"] == {"transformer": 1.5, "rnnsearch": 2.0}
    assert at_30["ratios"]["minutes"]["ratio"] == pytest.approx(2.0 / 1.5)
    assert at_30["ratios"]["flops"]["ratio"] == pytest.approx(40.0 / 15.0)  # rnnsearch-small's
    assert at_30["validation_minutes"] == {"transformer": 0.0, "rnnsearch": 0.0}
    assert list(verdicts) == [32.0, 30.0, 28.0]


def test_every_whole_level_pairs_each_familys_cheapest_size_there():
    rows = {row["level"]: row for row in cost.every_level(RUNS, ["rnnsearch", "transformer"])}
    assert list(rows) == [float(level) for level in range(1, 33)]  # up to the stated 32
    # 32: rnnsearch-small's seed 1 peaked at 31, so rnnsearch-large (120, 120; 80 and 80 at the
    # validations before) against transformer-small (20, 30; 10 and 20 before).
    at_32 = rows[32.0]
    assert at_32["sizes"] == {"rnnsearch": "rnnsearch-large", "transformer": "transformer-small"}
    assert at_32["ratio"] == pytest.approx(120 / 25)
    assert at_32["bounds"] == pytest.approx([80 / 25, 120 / 15])
    assert at_32["side"] == "more"  # 80 against 20 or 30 still keeps the interval above 1
    # 30: rnnsearch-small (30, 40, 50; 20, 30, 40 before) against transformer-small (10, 20),
    # whose seed 0 was there at its first validation: it may have crossed at any cost from 0.
    assert rows[30.0]["ratio"] == pytest.approx(40 / 15)
    assert rows[30.0]["bounds"] == [pytest.approx(30 / 15), None]  # no upper bound
    assert rows[30.0]["side"] == "more"
    # 5: every seed of both was there at its first validation: anything from 0 to infinity.
    assert rows[5.0]["ratio"] == pytest.approx(1.0)
    assert (rows[5.0]["bounds"], rows[5.0]["side"]) == ([0.0, None], None)
    # The other way round: the Transformer's highest (20, 30) below RNNsearch's lowest (80, 80).
    reverse = cost.every_level(RUNS, ["transformer", "rnnsearch"])
    assert next(r for r in reverse if r["level"] == 32.0)["side"] == "fewer"
    steps = cost.every_level(RUNS, ["rnnsearch", "transformer"], "step")
    assert steps[-1]["ratio"] == pytest.approx(300 / 250)  # 3rd points against 2nd and 3rd
    assert cost.every_level(RUNS, ["transformer"]) == []


def test_a_crossing_lies_between_the_validation_before_and_the_first_at_the_level():
    run = RUNS[0]  # BLEU 10, 20, 31, 33, 32 at 10, 20, 30, 40, 50 FLOPs
    assert cost.crossing_bounds(run, 31.0, "flops") == (20.0, 30.0)
    assert cost.crossing_bounds(run, 5.0, "flops") == (0.0, 10.0)  # before the first
    assert cost.crossing_bounds(run, 33.0, "step") == (300.0, 400.0)
    assert cost.crossing_bounds(run, 34.0, "flops") is None
