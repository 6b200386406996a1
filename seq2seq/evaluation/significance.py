"""Is one system better than another? Paired tests on one test set, and the spread over seeds.

Two systems that translated the same sentences are compared sentence by sentence (Koehn 2004;
Clark et al. 2011), with sacreBLEU's own implementations (``sacrebleu.significance``):

* paired bootstrap resampling: test sets of the same size are drawn with replacement, both
  systems scored on each; the p-value says how often a difference as large as the observed one
  arises by chance, and the 2.5th and 97.5th percentiles of the resampled differences are the
  95% confidence interval of the difference;
* approximate randomisation: each sentence's two translations are swapped at random; the p-value
  is the share of shuffles whose difference is at least the observed one.

The interval is read off the very resamples that sacreBLEU's bootstrap draws (the same seeded
indices, the same per-sentence statistics), so the interval and the p-value describe one
experiment. With several seeds per system, ``compare_seeds`` adds the variation that a test set
cannot show: the mean difference over seeds with a Welch t interval (Clark et al. 2011 ask for
several optimizer runs before a claim).
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest
from scipy import stats

LEVEL = 0.05  # a difference is significant when p < LEVEL and its 95% interval excludes 0


def _significant(p_value: float, interval: tuple[float, float] | None) -> bool:
    """p below the level and an interval that excludes 0. Both are asked for: sacreBLEU's tests
    give two identical systems p = 1 / (samples + 1), since no resample differs more than the
    observed zero; their interval [0, 0] does not exclude 0."""
    return p_value < LEVEL and interval is not None and (interval[0] > 0 or interval[1] < 0)


BOOTSTRAP_SAMPLES = 1000  # sacreBLEU's default resamples
RANDOMISATION_TRIALS = 10000  # sacreBLEU's default shuffles


def _metrics() -> dict:
    """Fresh metric objects (sacreBLEU's cache per-reference statistics inside them)."""
    return {"BLEU": BLEU(), "chrF": CHRF()}


@dataclasses.dataclass(frozen=True)
class PairedResult:
    """One metric's paired comparison of system A with system B on the same sentences."""

    metric: str  # "BLEU" or "chrF"
    score_a: float
    score_b: float
    difference: float  # score_a - score_b
    ci95: tuple[float, float]  # of the difference, from the paired bootstrap's resamples
    p_value: float  # paired bootstrap resampling (two-sided)
    p_value_randomisation: float  # approximate randomisation (two-sided)
    sentences: int
    bootstrap_samples: int
    randomisation_trials: int

    @property
    def significant(self) -> bool:
        return _significant(self.p_value, self.ci95)


def paired_test(
    hypotheses_a: Sequence[str],
    hypotheses_b: Sequence[str],
    references: Sequence[str],
    bootstrap_samples: int = BOOTSTRAP_SAMPLES,
    randomisation_trials: int = RANDOMISATION_TRIALS,
) -> dict[str, PairedResult]:
    """BLEU and chrF of A against B, each with its paired tests and difference interval.

    Raises:
      ValueError: the three lists do not align (one line).
    """
    if not len(hypotheses_a) == len(hypotheses_b) == len(references):
        raise ValueError(
            f"{len(hypotheses_a)} and {len(hypotheses_b)} hypotheses for {len(references)} "
            "references: a paired test needs both systems' translations of the same sentences"
        )
    systems = [("a", list(hypotheses_a)), ("b", list(hypotheses_b))]
    refs = [list(references)]
    bootstrap = PairedTest(systems, _metrics(), refs, "bs", bootstrap_samples)
    _, by_bootstrap = bootstrap()
    _, by_shuffles = PairedTest(systems, _metrics(), refs, "ar", randomisation_trials)()
    results = {}
    for name, metric in bootstrap.metrics.items():
        base, other = by_bootstrap[name]
        seed = bootstrap._seed or None  # as sacreBLEU passes it on to its resampling
        low, high = _difference_interval(
            metric, hypotheses_a, hypotheses_b, refs, bootstrap.n_samples, seed
        )
        label = "BLEU" if name == "BLEU" else "chrF"
        results[label] = PairedResult(
            metric=label,
            score_a=base.score,
            score_b=other.score,
            difference=base.score - other.score,
            ci95=(low, high),
            p_value=other.p_value,
            p_value_randomisation=by_shuffles[name][1].p_value,
            sentences=len(references),
            bootstrap_samples=bootstrap.n_samples,
            randomisation_trials=randomisation_trials,
        )
    return results


def bootstrap_scores(metric, hypotheses, references, samples: int, seed: int | None) -> np.ndarray:
    """The system's score on each of the test sets that sacreBLEU's paired bootstrap draws.

    sacreBLEU draws ``samples`` index sets of the test set's size from
    ``numpy.random.default_rng(seed)`` (``sacrebleu.significance._paired_bs_test``); drawing them
    the same way gives the same resamples, so these are the scores behind its p-value.
    """
    statistics_per_sentence = np.array(
        metric._extract_corpus_statistics(list(hypotheses), references), dtype="float32"
    )
    indices = np.random.default_rng(seed).choice(
        len(statistics_per_sentence), size=(samples, len(statistics_per_sentence)), replace=True
    )
    return np.array(
        [metric._compute_score_from_stats(s.sum(0)).score for s in statistics_per_sentence[indices]]
    )


def _difference_interval(metric, hypotheses_a, hypotheses_b, references, samples, seed):
    """The 95% interval of A - B over the bootstrap's resamples (percentiles 2.5 and 97.5)."""
    differences = bootstrap_scores(metric, hypotheses_a, references, samples, seed) - (
        bootstrap_scores(metric, hypotheses_b, references, samples, seed)
    )
    low, high = np.percentile(differences, [2.5, 97.5])
    return float(low), float(high)


@dataclasses.dataclass(frozen=True)
class SeedComparison:
    """A against B with several runs (seeds) each: the spread over seeds and every pair's test."""

    metric: str
    scores_a: list[float]  # one per seed
    scores_b: list[float]
    difference: float  # mean(scores_a) - mean(scores_b)
    ci95: tuple[float, float] | None  # Welch t interval of the difference; None for 1 seed each
    p_value: float  # Welch's t-test over seeds; with one seed each, the paired bootstrap's
    pairs: list[PairedResult]  # the paired tests of every seed of A with every seed of B

    @property
    def significant(self) -> bool:
        return _significant(self.p_value, self.ci95)

    @property
    def pairs_significant(self) -> int:
        """Seed pairs whose paired bootstrap finds a significant difference in the direction
        of the mean difference."""
        sign = np.sign(self.difference)
        return sum(p.significant and np.sign(p.difference) == sign for p in self.pairs)


def compare_seeds(
    hypotheses_a: Sequence[Sequence[str]],
    hypotheses_b: Sequence[Sequence[str]],
    references: Sequence[str],
    bootstrap_samples: int = BOOTSTRAP_SAMPLES,
    randomisation_trials: int = RANDOMISATION_TRIALS,
) -> dict[str, SeedComparison]:
    """A (one hypothesis list per seed) against B, for BLEU and chrF.

    With one seed each, the verdict is the paired test's; with more, it is Welch's t-test on the
    seeds' scores (the seeds' spread, not the test set's, is then the larger uncertainty), and
    every seed pair's paired test is kept beside it.
    """
    pairs = [
        paired_test(a, b, references, bootstrap_samples, randomisation_trials)
        for a, b in itertools.product(hypotheses_a, hypotheses_b)
    ]
    results = {}
    for metric in ("BLEU", "chrF"):
        tests = [pair[metric] for pair in pairs]
        a = [tests[i * len(hypotheses_b)].score_a for i in range(len(hypotheses_a))]
        b = [tests[j].score_b for j in range(len(hypotheses_b))]
        difference = statistics.mean(a) - statistics.mean(b)
        if len(a) > 1 and len(b) > 1 and (np.std(a) > 0 or np.std(b) > 0):
            welch = stats.ttest_ind(a, b, equal_var=False)
            interval = welch.confidence_interval(1 - LEVEL)
            ci95, p_value = (float(interval.low), float(interval.high)), float(welch.pvalue)
        elif len(a) == 1 and len(b) == 1:
            ci95, p_value = tests[0].ci95, tests[0].p_value
        else:
            ci95, p_value = None, 1.0 if difference == 0 else float("nan")
        results[metric] = SeedComparison(metric, a, b, difference, ci95, p_value, tests)
    return results


def verdict(name_a: str, name_b: str, result: SeedComparison, unit: str = "BLEU") -> str:
    """One sentence: which system is better and by how much, with its interval and p-value."""
    seeds = len(result.scores_a), len(result.scores_b)
    interval = (
        f"95% CI [{result.ci95[0]:.2f}, {result.ci95[1]:.2f}]" if result.ci95 else "no interval"
    )
    if seeds == (1, 1):
        pair = result.pairs[0]
        how = (
            f"paired bootstrap over the {pair.sentences:,} test sentences "
            f"({pair.bootstrap_samples:,} resamples); approximate randomisation "
            f"p = {pair.p_value_randomisation:.3g}"
        )
    else:
        how = (
            f"mean of {seeds[0]} and {seeds[1]} seeds, Welch's t-test over seeds; the paired "
            f"bootstrap finds the difference in {result.pairs_significant} of "
            f"{len(result.pairs)} seed pairs"
        )
    numbers = f"{interval}, p = {result.p_value:.3g} ({how})"
    if not result.significant:
        # p under the level beside "no significant difference" would read as a contradiction.
        rule = (
            f"; p is under {LEVEL} but the interval includes 0, and a difference counts as "
            f"significant only when both agree"
            if result.p_value < LEVEL
            else ""
        )
        return (
            f"No significant difference between `{name_a}` and `{name_b}` in {unit}: "
            f"{result.difference:+.2f}, {numbers}{rule}."
        )
    better, worse = (name_a, name_b) if result.difference > 0 else (name_b, name_a)
    if result.difference > 0 or result.ci95 is None:
        shown = interval
    else:  # the interval of better - worse
        shown = f"95% CI [{-result.ci95[1]:.2f}, {-result.ci95[0]:.2f}]"
    return (
        f"`{better}` is better than `{worse}` by {abs(result.difference):.2f} {unit}, "
        f"{shown}, p = {result.p_value:.3g} ({how})."
    )
