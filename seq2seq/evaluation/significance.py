"""Is one system better than another? Tests on one test set, over seeds and sentences together.

Two systems that translated the same sentences are compared sentence by sentence (Koehn 2004;
Clark et al. 2011), with sacreBLEU's own implementations (``sacrebleu.significance``):

* paired bootstrap resampling: test sets of the same size are drawn with replacement, both
  systems scored on each; the p-value says how often a difference as large as the observed one
  arises by chance, and the 2.5th and 97.5th percentiles of the resampled differences are the
  95% confidence interval of the difference;
* approximate randomisation: each sentence's two translations are swapped at random; the p-value
  is the share of shuffles whose difference is at least the observed one.

Both are two-sided (they compare the absolute difference). The interval is read off the very
resamples that sacreBLEU's bootstrap draws (the same seeded indices, the same per-sentence
statistics), so the interval and the p-value describe one experiment.

A verdict (``compare_seeds``) resamples seeds and sentences together: each resample draws the
test sentences (the same ones for both systems) and, for each system on its own, its seeds, all
with replacement, and recomputes both mean corpus scores from per-sentence sufficient statistics.
The interval then holds both the test set's sampling and the optimizer's variation from seed to
seed (Clark et al. 2011 ask for several optimizer runs before a claim); with one seed each it
draws the paired bootstrap's resamples above. Its two-sided p-value is twice the smaller share of
resamples on either side of 0, so that identical systems get p = 1. Welch's t over the seeds (the
test set held fixed) stays beside it. The
verdicts of one report are one family of tests: ``adjust_for_family`` applies Holm's step-down
correction (Holm 1979) to their p-values, and only the adjusted p decides significance.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from sacrebleu.metrics import CHRF
from sacrebleu.significance import PairedTest
from scipy import stats

from seq2seq.evaluation.bleu import bleu_metric

LEVEL = 0.05  # a difference is significant when p < LEVEL and its 95% interval excludes 0


def _significant(p_value: float, interval: tuple[float, float] | None) -> bool:
    """p below the level and an interval that excludes 0. Both are asked for: sacreBLEU's tests
    give two identical systems p = 1 / (samples + 1), since no resample differs more than the
    observed zero; their interval [0, 0] does not exclude 0. A verdict passes its p-value after
    Holm's adjustment (``adjust_for_family``)."""
    return p_value < LEVEL and interval is not None and (interval[0] > 0 or interval[1] < 0)


BOOTSTRAP_SAMPLES = 1000  # sacreBLEU's default resamples
# sacreBLEU's default seed (SACREBLEU_SEED): with one seed a side, ``seeds_and_sentences_bootstrap``
# draws the very test sets that sacreBLEU's paired bootstrap draws.
BOOTSTRAP_SEED = 12345
# Resampled differences closer to 0 than this (in BLEU or chrF points) are ties: the mean of
# equal seed scores, taken over different draws of the seeds, can differ from it in the last bit.
TIE = 1e-9
RANDOMISATION_TRIALS = 10000  # sacreBLEU's default shuffles


def _metrics(target_lang: str = "") -> dict:
    """Fresh metric objects (sacreBLEU's cache per-reference statistics inside them); BLEU
    tokenizes as sacreBLEU does by default for ``target_lang``."""
    return {"BLEU": bleu_metric(target_lang), "chrF": CHRF()}


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
    target_lang: str = "",
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
    bootstrap = PairedTest(systems, _metrics(target_lang), refs, "bs", bootstrap_samples)
    _, by_bootstrap = bootstrap()
    _, by_shuffles = PairedTest(systems, _metrics(target_lang), refs, "ar", randomisation_trials)()
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


def sentence_statistics(
    metric, hypotheses: Sequence[Sequence[str]], references: Sequence[str]
) -> np.ndarray:
    """[seeds, N, F]: each seed's per-sentence sufficient statistics, by sacreBLEU.

    F statistics a sentence (BLEU: hypothesis and reference lengths, then matched and total
    n-grams of each order; chrF: its character n-gram counts); corpus scores come from their sums.

    Raises:
      ValueError: a seed's hypotheses do not align with the references (one line).
    """
    for seed_hypotheses in hypotheses:
        if len(seed_hypotheses) != len(references):
            raise ValueError(
                f"{len(seed_hypotheses)} hypotheses for {len(references)} references: every seed "
                "must translate every test sentence"
            )
    return np.array(
        [metric._extract_corpus_statistics(list(h), [list(references)]) for h in hypotheses],
        dtype=np.float64,
    )


def _corpus_scores(metric, summed: np.ndarray) -> np.ndarray:
    """[..., F] statistics summed over sentences -> [...] the metric's corpus scores (sacreBLEU's
    own formula, one call per row: a few microseconds each)."""
    rows = summed.reshape(-1, summed.shape[-1])
    scores = [metric._compute_score_from_stats(row).score for row in rows]
    return np.array(scores).reshape(summed.shape[:-1])


@dataclasses.dataclass(frozen=True)
class Bootstrap:
    """A - B from resampling seeds and sentences together."""

    difference: float  # mean corpus score of A's seeds minus B's, on the whole test set
    ci95: tuple[float, float]  # percentiles 2.5 and 97.5 of the resampled differences
    p_value: float  # two-sided
    samples: int


def _draw_counts(draws: np.ndarray, size: int) -> np.ndarray:
    """[R, n] indices drawn from ``range(size)`` -> [R, size] how often each index was drawn."""
    offsets = np.arange(draws.shape[0])[:, None] * size
    counts = np.bincount((draws + offsets).ravel(), minlength=draws.shape[0] * size)
    return counts.reshape(draws.shape[0], size)


def _two_sided_p(differences: np.ndarray) -> float:
    """Twice the smaller share of resampled differences on either side of 0, capped at 1: the
    smallest level whose percentile interval would exclude 0. Koehn (2004) reads the share of
    resamples that the better system loses as a one-sided p-value. Counting the observed test set
    as one more resample keeps p above 0 (a thousand resamples cannot show p = 0)."""
    below = int(np.count_nonzero(differences <= TIE))
    above = int(np.count_nonzero(differences >= -TIE))
    return min(1.0, 2 * (min(below, above) + 1) / (len(differences) + 1))


def seeds_and_sentences_bootstrap(
    statistics_a: np.ndarray,
    statistics_b: np.ndarray,
    corpus_scores: Callable[[np.ndarray], np.ndarray],
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int | None = BOOTSTRAP_SEED,
) -> Bootstrap:
    """A against B, with the test sentences and each system's seeds resampled together.

    Each of the ``samples`` resamples draws N test sentences with replacement, the same ones for
    both systems (they translated the same test set), and, for each system on its own, as many
    seeds as it has, with replacement. A system's score on the resample is the mean, over its
    drawn seeds, of the corpus score on the drawn sentences, computed from summed per-sentence
    statistics. With one seed each, this is the paired bootstrap on the test sets that
    sacreBLEU's paired bootstrap draws (the sentences come first, by the same call and seed).

    Args:
      statistics_a: [seeds_a, N, F] A's per-sentence statistics, one row of N per seed.
      statistics_b: [seeds_b, N, F] B's.
      corpus_scores: [..., F] statistics summed over sentences -> [...] corpus scores.
      samples: the number of resamples R.
      seed: of the generator that draws them.

    Raises:
      ValueError: the statistics' shapes do not match, or no resample is asked for (one line).
    """
    if statistics_a.ndim != 3 or statistics_a.shape[1:] != statistics_b.shape[1:]:
        raise ValueError(
            f"statistics of shapes {statistics_a.shape} and {statistics_b.shape}: both must be "
            "[seeds, sentences, statistics] over the same sentences"
        )
    if samples < 1 or len(statistics_a) < 1 or len(statistics_b) < 1:
        raise ValueError(
            f"{samples} resamples of {len(statistics_a)} and {len(statistics_b)} seeds: a "
            "bootstrap needs at least one resample and one seed a side"
        )
    rng = np.random.default_rng(seed)
    sentences = statistics_a.shape[1]
    drawn = rng.choice(sentences, size=(samples, sentences), replace=True)  # [R, N]
    sentence_counts = _draw_counts(drawn, sentences).astype(np.float64)  # [R, N]

    def resampled(statistics: np.ndarray) -> np.ndarray:  # [seeds, N, F] -> [R]
        seeds = len(statistics)
        seed_counts = _draw_counts(rng.integers(seeds, size=(samples, seeds)), seeds)  # [R, seeds]
        summed = np.tensordot(sentence_counts, statistics, axes=(1, 1))  # [R, seeds, F]
        return (corpus_scores(summed) * seed_counts).sum(axis=1) / seeds

    differences = resampled(statistics_a) - resampled(statistics_b)  # [R]
    observed = corpus_scores(statistics_a.sum(1)).mean() - corpus_scores(statistics_b.sum(1)).mean()
    low, high = np.percentile(differences, [2.5, 97.5])
    return Bootstrap(float(observed), (float(low), float(high)), _two_sided_p(differences), samples)


def welch_over_seeds(
    scores_a: Sequence[float], scores_b: Sequence[float]
) -> tuple[tuple[float, float], float] | None:
    """Welch's t over the seeds' scores, the test set held fixed: the 95% interval of
    mean(A) - mean(B) and the two-sided p; None with fewer than two seeds a side or no spread."""
    if len(scores_a) < 2 or len(scores_b) < 2 or (np.std(scores_a) == np.std(scores_b) == 0):
        return None
    welch = stats.ttest_ind(scores_a, scores_b, equal_var=False)
    interval = welch.confidence_interval(1 - LEVEL)
    return (float(interval.low), float(interval.high)), float(welch.pvalue)


def resamples_for_family(tests: int, samples: int = BOOTSTRAP_SAMPLES) -> int:
    """At least ``samples``, and enough resamples R that the smallest p a bootstrap can show,
    2 / (R + 1), stays under a quarter of the level once Holm multiplies it by ``tests``: with
    too few, no difference in a large report could be significant, however clear."""
    return max(samples, math.ceil(8 * tests / LEVEL))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the order given.

    With the m p-values sorted, p_(1) <= ... <= p_(m), the adjusted value of p_(i) is
    max_{j <= i} min(1, (m - j + 1) p_(j)): rejecting every hypothesis whose adjusted p is under
    the level keeps the chance of any false rejection under it, whatever their dependence.

    Raises:
      ValueError: a p-value outside [0, 1] (one line).
    """
    if any(not 0 <= p <= 1 for p in p_values):
        raise ValueError(f"p-values must lie in [0, 1], got {list(p_values)}")
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(np.argsort(p_values, kind="stable")):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


@dataclasses.dataclass(frozen=True)
class SeedComparison:
    """A against B with one or more runs (seeds) each: the bootstrap over seeds and sentences,
    Welch's t over seeds beside it, and every seed pair's paired test."""

    metric: str
    scores_a: list[float]  # one per seed
    scores_b: list[float]
    difference: float  # mean(scores_a) - mean(scores_b)
    ci95: tuple[float, float] | None  # of the difference, from the seeds-and-sentences bootstrap
    p_value: float  # two-sided, the same bootstrap's
    pairs: list[PairedResult]  # the paired tests of every seed of A with every seed of B
    bootstrap_samples: int = BOOTSTRAP_SAMPLES
    welch_ci95: tuple[float, float] | None = None  # None below two seeds a side or no spread
    welch_p_value: float | None = None  # two-sided
    p_adjusted: float | None = None  # Holm's, over the report's family; None: not adjusted
    family_size: int = 1  # the tests in that family

    @property
    def significant(self) -> bool:
        return _significant(self.p_value if self.p_adjusted is None else self.p_adjusted, self.ci95)

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
    tests_in_family: int = 1,
    target_lang: str = "",
) -> dict[str, SeedComparison]:
    """A (one hypothesis list per seed) against B, for BLEU and chrF.

    The verdict's interval and p-value come from ``seeds_and_sentences_bootstrap``, whatever
    the seed counts (3 against 1 too), with ``resamples_for_family(tests_in_family)`` resamples
    at least (the tests whose p-values will be Holm-adjusted together); Welch's t over seeds and
    every seed pair's paired test (``bootstrap_samples`` resamples) are kept beside it.
    """
    pairs = [
        paired_test(a, b, references, bootstrap_samples, randomisation_trials, target_lang)
        for a, b in itertools.product(hypotheses_a, hypotheses_b)
    ]
    results = {}
    for name, metric in _metrics(target_lang).items():
        tests = [pair[name] for pair in pairs]
        a = [tests[i * len(hypotheses_b)].score_a for i in range(len(hypotheses_a))]
        b = [tests[j].score_b for j in range(len(hypotheses_b))]
        bootstrap = seeds_and_sentences_bootstrap(
            sentence_statistics(metric, hypotheses_a, references),
            sentence_statistics(metric, hypotheses_b, references),
            functools.partial(_corpus_scores, metric),
            resamples_for_family(tests_in_family, bootstrap_samples),
        )
        welch_ci95, welch_p_value = welch_over_seeds(a, b) or (None, None)
        results[name] = SeedComparison(
            name,
            a,
            b,
            bootstrap.difference,
            bootstrap.ci95,
            bootstrap.p_value,
            tests,
            bootstrap_samples=bootstrap.samples,
            welch_ci95=welch_ci95,
            welch_p_value=welch_p_value,
        )
    return results


def adjusted_entries(rows: Sequence[Mapping[str, SeedComparison]]) -> list[dict[str, dict]]:
    """Each row's comparisons (metric -> ``SeedComparison``) as plain entries for a report,
    Holm-adjusted over every comparison of every row: ``difference``, ``ci95``, ``p_value``,
    ``p_value_holm`` and ``significant``, by metric, one dict per row."""
    adjusted = iter(adjust_for_family([result for row in rows for result in row.values()]))
    entries = []
    for row in rows:
        entries.append({})
        for metric in row:
            result = next(adjusted)
            entries[-1][metric] = {
                "difference": result.difference,
                "ci95": list(result.ci95) if result.ci95 else None,
                "p_value": result.p_value,
                "p_value_holm": result.p_adjusted,
                "significant": result.significant,
            }
    return entries


def adjust_for_family(results: Sequence[SeedComparison]) -> list[SeedComparison]:
    """The comparisons of one report, each with its Holm-adjusted p over all of them."""
    adjusted = holm([result.p_value for result in results])
    return [
        dataclasses.replace(result, p_adjusted=p, family_size=len(results))
        for result, p in zip(results, adjusted, strict=True)
    ]


def _interval(ci95: tuple[float, float]) -> str:
    return f"95% CI [{ci95[0]:.2f}, {ci95[1]:.2f}]"


def _p_values(result: SeedComparison) -> str:
    text = f"two-sided p = {result.p_value:.3g}"
    if result.p_adjusted is not None and result.family_size > 1:
        text += (
            f", Holm-adjusted over the report's {result.family_size} tests "
            f"p = {result.p_adjusted:.3g}"
        )
    return text


def _method(result: SeedComparison) -> str:
    """How the interval and p-value were found, and what the other tests say."""
    seeds = len(result.scores_a), len(result.scores_b)
    sentences = result.pairs[0].sentences
    if seeds == (1, 1):
        return (
            f"paired bootstrap over the {sentences:,} test sentences, "
            f"{result.bootstrap_samples:,} resamples; approximate randomisation "
            f"two-sided p = {result.pairs[0].p_value_randomisation:.3g}"
        )
    welch = (
        f"; Welch's t over seeds: {_interval(result.welch_ci95)}, "
        f"two-sided p = {result.welch_p_value:.3g}"
        if result.welch_ci95 is not None
        else ""
    )
    return (
        f"bootstrap over {seeds[0]} and {seeds[1]} seeds and the {sentences:,} test sentences "
        f"together, {result.bootstrap_samples:,} resamples{welch}; the paired bootstrap finds "
        f"the difference in {result.pairs_significant} of {len(result.pairs)} seed pairs"
    )


def verdict(name_a: str, name_b: str, result: SeedComparison, unit: str = "BLEU") -> str:
    """One sentence: which system is better and by how much, with its interval and p-values."""
    interval = _interval(result.ci95) if result.ci95 else "no interval"
    numbers = f"{_p_values(result)} ({_method(result)})"
    if not result.significant:
        # p under the level beside "no significant difference" would read as a contradiction.
        rule = ""
        if result.p_value < LEVEL and result.p_adjusted is not None and result.p_adjusted >= LEVEL:
            rule = f"; p is under {LEVEL} but not after Holm's adjustment for the report's tests"
        elif result.p_value < LEVEL:
            rule = (
                f"; p is under {LEVEL} but the interval includes 0, and a difference counts as "
                f"significant only when both agree"
            )
        return (
            f"No significant difference between `{name_a}` and `{name_b}` in {unit}: "
            f"{result.difference:+.2f}, {interval}, {numbers}{rule}."
        )
    better, worse = (name_a, name_b) if result.difference > 0 else (name_b, name_a)
    if result.difference > 0 or result.ci95 is None:
        shown = interval
    else:  # the interval of better - worse
        shown = _interval((-result.ci95[1], -result.ci95[0]))
    return (
        f"`{better}` is better than `{worse}` by {abs(result.difference):.2f} {unit}, "
        f"{shown}, {numbers}."
    )
