"""What each family pays to reach a validation level, with an interval over seeds.

"The Transformer converges with less compute" is a claim about training cost, and it deserves
the treatment BLEU gets: a number per seed, an interval over seeds, and a stated rule. Here the
cost of a run to reach validation BLEU ``level`` is the training FLOPs (or steps, or training
minutes on the device that trained it) at its first validation point at or above ``level``; a
size's cost is the mean over its seeds, with a Student-t 95% interval (seeds are few, so the
interval is wide, and honest about it).
A family's cost is that of its cheapest size whose every seed reached the level (the size a
researcher aiming at that level would train), among its sizes with at least two seeds where one
got there: a single seed has no interval, and a ratio resampling it would look surer than it is.
Two families are compared by the ratio of their means, with a bootstrap interval that resamples
each side's seeds.

Minutes are Vaswani et al.'s axis: their claim is that the Transformer trains in less *time*,
because it parallelises where a recurrence cannot, which FLOPs and steps do not show. They are
training minutes (validation, compiling and checkpoints off the clock); the validation minutes a
run had spent by then are kept beside them, so that a reader sees what the clock left out.

The frontier's budget rule counts a size within a budget only when its most expensive seed
converged within it (``frontier.choose``); ``budget_rule`` states what that costs each size:
its most expensive seed against its mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from seq2seq.compare.frontier import Point, RunRecord, by_config

AXES = ("flops", "step", "minutes")  # attributes of ``frontier.Point``
BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 0  # the same resamples on every rebuild of a report
LEVEL_STEP = 2.0  # BLEU between the stated levels
LEVELS = 3  # how many levels a report states, the highest first
MIN_SEEDS = 2  # a size with fewer is a family's cost only where no size with more got there


def first_point(run: RunRecord, level: float) -> Point | None:
    """``run``'s first validation point at or above BLEU ``level``; None if it never got there."""
    for point in sorted(run.curve, key=lambda p: p.step):
        if point.bleu >= level:
            return point
    return None


def mean_interval(values: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """The mean of ``values`` and its Student-t 95% interval (None with fewer than 2)."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, None
    half = stats.t.ppf(0.975, len(values) - 1) * stats.sem(values)
    return mean, (mean - float(half), mean + float(half))


def size_costs(runs: Sequence[RunRecord], level: float, axis: str = "flops") -> list[dict]:
    """Per size (its seeds together): what each seed paid to reach ``level``, and the mean
    with its interval over the seeds that did (with the mean validation minutes they had spent
    by then)."""
    rows = []
    for name, members in by_config(runs).items():
        points = [first_point(run, level) for run in members]
        costs = [None if p is None else float(getattr(p, axis)) for p in points]
        reached = [cost for cost in costs if cost is not None]
        mean, interval = mean_interval(reached) if reached else (None, None)
        validation = [p.validation_minutes for p in points if p is not None]
        rows.append(
            {
                "size": name,
                "family": members[0].family,
                "level": level,
                "axis": axis,
                "seeds": len(members),
                "reached": len(reached),
                "costs": costs,
                "mean": mean,
                "ci95": list(interval) if interval else None,
                "validation_minutes": float(np.mean(validation)) if validation else None,
            }
        )
    return rows


def family_cost(
    runs: Sequence[RunRecord], family: str, level: float, axis: str = "flops"
) -> dict | None:
    """The family's cheapest size (by mean cost) whose every seed reached ``level``: of its
    sizes with ``MIN_SEEDS`` seeds or more if one of those did, else of all its sizes."""
    rows = [
        row
        for row in size_costs([r for r in runs if r.family == family], level, axis)
        if row["reached"] == row["seeds"]
    ]
    seeded = [row for row in rows if row["seeds"] >= MIN_SEEDS]
    return min(seeded or rows, key=lambda row: row["mean"], default=None)


def ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, tuple[float, float]]:
    """mean(a) / mean(b) and its 95% percentile interval, resampling each side's seeds."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    means_a = rng.choice(a, size=(samples, a.size)).mean(axis=1)
    means_b = rng.choice(b, size=(samples, b.size)).mean(axis=1)
    low, high = np.percentile(means_a / means_b, [2.5, 97.5])
    return float(a.mean() / b.mean()), (float(low), float(high))


def stated_levels(runs: Sequence[RunRecord], families: Sequence[str]) -> list[float]:
    """The validation levels a report states: the highest whole BLEU that every family reaches
    in every seed of one of its sizes, then ``LEVEL_STEP`` below it, ``LEVELS`` in all."""
    tops = []
    for family in families:
        reachable = [
            min(run.best.bleu for run in members)
            for members in by_config(r for r in runs if r.family == family).values()
            if all(run.curve for run in members)
        ]
        if not reachable:
            return []
        tops.append(max(reachable))
    top = math.floor(min(tops))
    return [top - LEVEL_STEP * k for k in range(LEVELS)]


def cost_to_levels(runs: Sequence[RunRecord], families: Sequence[str]) -> list[dict]:
    """At each stated level and on each of ``AXES``, each family's cost and, with two families,
    the ratio of the first's to the second's with its interval."""
    rows = []
    for level in stated_levels(runs, families):
        for axis in AXES:
            picks = {family: family_cost(runs, family, level, axis) for family in families}
            row = {"level": level, "axis": axis, "families": picks}
            if len(families) == 2 and all(picks.values()):
                a, b = (picks[family]["costs"] for family in families)
                ratio, interval = ratio_interval(a, b)
                row |= {"ratio": ratio, "ratio_ci95": list(interval)}
                row |= decided(runs, families, picks, level, axis)
            rows.append(row)
    return rows


def crossing_bounds(run: RunRecord, level: float, axis: str) -> tuple[float, float] | None:
    """Where ``run`` crossed BLEU ``level`` on ``axis``: after its last validation below the
    level (0 if its first validation was already there) and by its first at or above it. None
    if it never got there."""
    points = sorted(run.curve, key=lambda p: p.step)
    for index, point in enumerate(points):
        if point.bleu >= level:
            before = float(getattr(points[index - 1], axis)) if index else 0.0
            return before, float(getattr(point, axis))
    return None


def every_level(
    runs: Sequence[RunRecord], families: Sequence[str], axis: str = "flops"
) -> list[dict]:
    """At every whole validation level from 1 up to the highest stated one that both of two
    families reach: the sizes each pays for (``family_cost``) and the first family's cost over
    the second's on ``axis``, with its bootstrap interval. The stated levels are three points of
    this curve; a claim such as "never dearer" needs the rest of it.

    A seed's cost is read at its first validation at or above the level, but it crossed the
    level somewhere after the validation before (``crossing_bounds``). Where two families'
    validations fall at different costs, the ratio of the first points can lie off 1 by the
    schedule alone: 0.65 [0.64, 0.65] where the crossings allow anything from 0.3 to 1.3.
    ``side`` is "more" or "fewer" only where the interval stays off 1 with every seed's crossing
    put at the end of its bounds least favourable to that side, else None; ``bounds`` is the
    ratio of the means so placed, both ways (the upper None where a seed of the second family
    was at the level at its first validation: it may have crossed at no cost)."""
    stated = stated_levels(runs, families)
    if len(families) != 2 or not stated:
        return []
    rows = []
    for level in range(1, math.floor(stated[0]) + 1):
        picks = {family: family_cost(runs, family, level, axis) for family in families}
        if not all(picks.values()):
            continue
        ratio, interval = ratio_interval(*(picks[family]["costs"] for family in families))
        rows.append(
            {
                "level": float(level),
                "axis": axis,
                "sizes": {family: picks[family]["size"] for family in families},
                "ratio": ratio,
                "ratio_ci95": list(interval),
                **decided(runs, families, picks, level, axis),
            }
        )
    return rows


def decided(
    runs: Sequence[RunRecord], families: Sequence[str], picks: dict, level: float, axis: str
) -> dict:
    """``bounds`` and ``side`` of two families' ratio at ``level`` (see ``every_level``), their
    sizes being ``picks`` (``family_cost``'s)."""
    (a_low, a_high), (b_low, b_high) = (
        zip(
            *(
                crossing_bounds(run, level, axis)
                for run in runs
                if run.family == family and run.config_name == picks[family]["size"]
            ),
            strict=True,
        )
        for family in families
    )
    side = None
    if ratio_interval(a_low, b_high)[1][0] > 1:  # the first's lowest over the second's highest
        side = "more"
    elif min(b_low) > 0 and ratio_interval(a_high, b_low)[1][1] < 1:  # highest over lowest
        side = "fewer"
    return {
        "bounds": [
            float(np.mean(a_low) / np.mean(b_high)),
            float(np.mean(a_high) / np.mean(b_low)) if min(b_low) > 0 else None,  # unbounded
        ],
        "side": side,
    }


def first_in_time(rows: Sequence[dict]) -> list[dict]:
    """Per stated level (the highest first) that two families both reach: the family first in
    training time (the lower mean over its chosen size's seeds), and on every axis the other's
    cost over the leader's with its bootstrap interval. ``rows`` is ``cost_to_levels``'s."""
    verdicts = []
    for level in dict.fromkeys(row["level"] for row in rows):
        rows_at = {row["axis"]: row for row in rows if row["level"] == level}
        at = {axis: row["families"] for axis, row in rows_at.items()}
        picks = at.get("minutes", {})
        if len(picks) != 2 or not all(picks.values()):
            continue
        leader, other = sorted(picks, key=lambda family: picks[family]["mean"])
        ratios = {}
        for axis, families in at.items():
            ratio, interval = ratio_interval(families[other]["costs"], families[leader]["costs"])
            # decided either way (``decided``): the side is the same whichever family is first
            ratios[axis] = {"ratio": ratio, "ci95": list(interval)}
            if "side" in rows_at[axis]:
                ratios[axis]["decided"] = rows_at[axis]["side"] is not None
        verdicts.append(
            {
                "level": level,
                "leader": leader,
                "other": other,
                "minutes": {family: picks[family]["mean"] for family in (leader, other)},
                "validation_minutes": {
                    family: picks[family]["validation_minutes"] for family in (leader, other)
                },
                "ratios": ratios,
            }
        )
    return verdicts


def budget_rule(runs: Sequence[RunRecord]) -> list[dict]:
    """Per size with more than one seed: its seeds' mean training FLOPs to their end, its most
    expensive seed's (what the budget rule counts), and the ratio of the two."""
    rows = []
    for name, members in by_config(runs).items():
        if len(members) < 2:
            continue
        flops = [run.flops for run in members]
        mean = float(np.mean(flops))
        rows.append(
            {
                "size": name,
                "family": members[0].family,
                "seeds": len(members),
                "mean_flops": mean,
                "max_flops": max(flops),
                "max_over_mean": max(flops) / mean,
            }
        )
    return rows
