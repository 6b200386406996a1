"""Significance tests: sacreBLEU's own numbers, identical systems never significant, a clear
difference found in the right direction, the bootstrap over seeds and sentences (its coverage in
simulation, unequal seed counts) and Holm's adjustment."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from seq2seq.evaluation import significance

SAMPLES, TRIALS = 200, 500  # small but enough to separate the systems below


@pytest.fixture(scope="module")
def systems(multi30k):
    """Real English references and two degraded copies: A loses one word in eight, B one in
    three (so A is clearly better), and C is A with one sentence in five degraded like B."""
    references = (multi30k / "test_2016_flickr.en").read_text().splitlines()[:300]

    def drop(every: int, sentences: list[str]) -> list[str]:
        return [
            " ".join(w for i, w in enumerate(s.split()) if (i + k) % every) or s
            for k, s in enumerate(sentences)
        ]

    a, b = drop(8, references), drop(3, references)
    c = [bi if i % 5 == 0 else ai for i, (ai, bi) in enumerate(zip(a, b, strict=True))]
    return references, a, b, c


def _cli(tmp_path: Path, references, a, b) -> str:
    files = {}
    for name, lines in (("ref", references), ("a", a), ("b", b)):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text("\n".join(lines) + "\n")
    sacrebleu = Path(sys.executable).with_name("sacrebleu")
    command = [str(sacrebleu), str(files["ref"]), "-i", str(files["a"]), str(files["b"])]
    command += ["--paired-bs", "--paired-bs-n", str(SAMPLES), "-m", "bleu", "--format", "text"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def test_p_value_and_scores_equal_the_sacrebleu_command_line(systems, tmp_path):
    references, a, b, _ = systems
    result = significance.paired_test(a, b, references, SAMPLES, TRIALS)["BLEU"]
    table = _cli(tmp_path, references, a, b)
    p_value = float(re.search(r"\(p = ([0-9.]+)\)", table).group(1))
    scores = [float(x) for x in re.findall(r"│\s+([0-9.]+) \(", table)]
    assert result.p_value == pytest.approx(p_value, abs=5e-5)
    assert [round(result.score_a, 1), round(result.score_b, 1)] == scores


def test_the_interval_comes_from_the_resamples_behind_the_p_value(systems):
    references, a, b, _ = systems
    metric = BLEU()
    _, scores = PairedTest([("a", a), ("b", b)], {"BLEU": metric}, [references], "bs", SAMPLES)()
    resampled = significance.bootstrap_scores(BLEU(), b, [references], SAMPLES, 12345)
    # sacreBLEU reports the mean of B's scores over its resamples: the same resamples give it.
    assert resampled.mean() == pytest.approx(scores["BLEU"][1].mean, abs=1e-9)
    result = significance.paired_test(a, b, references, SAMPLES, TRIALS)["BLEU"]
    low, high = result.ci95
    assert low < result.difference < high


def test_identical_systems_show_no_significant_difference(systems):
    references, a, _, _ = systems
    for result in significance.paired_test(a, list(a), references, SAMPLES, TRIALS).values():
        assert result.difference == 0 and not result.significant
    seeds = significance.compare_seeds([a], [list(a)], references, SAMPLES, TRIALS)["BLEU"]
    sentence = significance.verdict("A", "A again", seeds)
    assert sentence.startswith("No significant difference between `A` and `A again`")


def test_a_small_p_with_an_interval_across_zero_says_why_it_is_not_significant(systems):
    _, a, b, _ = systems
    pair = significance.paired_test(a, b, systems[0], SAMPLES, TRIALS)["BLEU"]
    seeds = significance.SeedComparison("BLEU", [30.0], [29.1], 0.9, (-0.05, 2.0), 0.047, [pair])
    sentence = significance.verdict("A", "B", seeds)
    assert sentence.startswith("No significant difference between `A` and `B`")
    assert "p = 0.047" in sentence and "the interval includes 0" in sentence
    seeds = significance.SeedComparison("BLEU", [30.0], [29.1], 0.9, (-0.05, 2.0), 0.3, [pair])
    assert "the interval includes 0" not in significance.verdict("A", "B", seeds)


def test_a_clear_difference_is_significant_in_its_direction(systems):
    references, a, b, _ = systems
    forward = significance.paired_test(a, b, references, SAMPLES, TRIALS)
    backward = significance.paired_test(b, a, references, SAMPLES, TRIALS)
    for metric in ("BLEU", "chrF"):
        assert forward[metric].significant and forward[metric].ci95[0] > 0
        assert forward[metric].p_value_randomisation < 0.05
        assert backward[metric].difference == pytest.approx(-forward[metric].difference)
        assert backward[metric].ci95[1] < 0
    seeds = significance.compare_seeds([b], [a], references, SAMPLES, TRIALS)["BLEU"]
    sentence = significance.verdict("B", "A", seeds)
    assert sentence.startswith(f"`A` is better than `B` by {forward['BLEU'].difference:.2f} BLEU")
    low, high = forward["BLEU"].ci95
    assert f"95% CI [{low:.2f}, {high:.2f}]" in sentence


# B's identical seeds have no variance, which scipy's t-test notes as a loss of precision.
@pytest.mark.filterwarnings("ignore:Precision loss occurred in moment calculation:RuntimeWarning")
def test_seeds_are_compared_by_their_spread_and_every_pair_is_tested(systems):
    references, a, b, c = systems
    result = significance.compare_seeds([a, c], [b, b], references, SAMPLES, TRIALS)["BLEU"]
    assert len(result.pairs) == 4
    bleu = [p.score_a for p in significance.paired_test(a, b, references, SAMPLES, 10).values()]
    assert result.scores_a[0] == pytest.approx(bleu[0])
    assert result.difference == pytest.approx(np.mean(result.scores_a) - np.mean(result.scores_b))
    low, high = result.ci95  # the bootstrap over seeds and sentences
    assert low < result.difference < high
    # B's two seeds are one system: no spread on its side, A's two differ; Welch's t-test then
    # rests on A's spread alone (df = 1), so its interval is wide.
    low, high = result.welch_ci95
    assert low < result.difference < high
    assert high - low > 2 * abs(result.scores_a[0] - result.scores_a[1])
    assert result.pairs_significant == 4


def _mean_score(summed: np.ndarray) -> np.ndarray:
    """An additive metric: [..., 2] summed (score, 1) per sentence -> [...] mean sentence score."""
    return summed[..., 0] / summed[..., 1]


def _simulated_seeds(rng, system_mean, difficulty, sentence_sd, seeds, seed_sd):
    """[seeds, N, 2] per-sentence (score, 1) of one system: its mean, the sentences' shared
    difficulty, its own sentence effects (the same for all its seeds), a seed effect and noise."""
    own = rng.normal(0, sentence_sd, len(difficulty))  # [N]
    scores = system_mean + difficulty + own + rng.normal(0, seed_sd, (seeds, 1))  # [seeds, N]
    scores = scores + rng.normal(0, 1, scores.shape)
    return np.stack([scores, np.ones_like(scores)], axis=-1)


def test_the_bootstrap_over_seeds_and_sentences_covers_the_true_difference():
    """200 comparisons of 3 seeds against 3 on 100 sentences freshly drawn each time, true
    difference 1 point; the sentence effects (sd 4 per system) outweigh the seeds' (sd 0.2)."""
    rng = np.random.default_rng(0)
    truth, comparisons, covered, welch_covered, width_ratios = 1.0, 200, 0, 0, []
    for index in range(comparisons):
        difficulty = rng.normal(0, 10, 100)  # [N], shared by both systems
        a = _simulated_seeds(rng, 30 + truth, difficulty, 4.0, 3, 0.2)
        b = _simulated_seeds(rng, 30, difficulty, 4.0, 3, 0.2)
        result = significance.seeds_and_sentences_bootstrap(a, b, _mean_score, seed=index)
        low, high = result.ci95
        covered += low <= truth <= high
        (welch_low, welch_high), _ = significance.welch_over_seeds(
            _mean_score(a.sum(1)), _mean_score(b.sum(1))
        )
        welch_covered += welch_low <= truth <= welch_high
        width_ratios.append((high - low) / (welch_high - welch_low))
    assert 0.90 <= covered / comparisons <= 0.99
    # Over seeds alone the test set is held fixed: its sentences' noise is left out.
    assert np.median(width_ratios) > 1.5
    assert welch_covered / comparisons < 0.85


def test_one_seed_each_is_the_paired_bootstrap_on_sacrebleus_resamples(systems):
    references, a, b, _ = systems
    paired = significance.paired_test(a, b, references, SAMPLES, TRIALS)
    seeds = significance.compare_seeds([a], [b], references, SAMPLES, TRIALS)
    for metric in ("BLEU", "chrF"):
        # The same resamples; the paired test sums its statistics in float32 (as sacreBLEU does).
        assert seeds[metric].ci95 == pytest.approx(paired[metric].ci95, abs=1e-4)
        assert seeds[metric].difference == pytest.approx(paired[metric].difference, abs=1e-9)


def test_the_bootstrap_recomputes_sacrebleus_corpus_scores_from_sentence_statistics(systems):
    references, a, b, c = systems
    for metric in (BLEU(), CHRF()):
        summed = significance.sentence_statistics(metric, [a, b, c], references).sum(1)
        scores = significance._corpus_scores(metric, summed)  # [3]
        expected = [metric.corpus_score(h, [references]).score for h in (a, b, c)]
        assert scores == pytest.approx(expected, abs=1e-9)


def test_three_seeds_against_one_get_a_finite_verdict(systems):
    references, a, b, c = systems
    result = significance.compare_seeds([a, c, a], [b], references, SAMPLES, TRIALS)["BLEU"]
    low, high = result.ci95
    assert np.isfinite([low, high, result.p_value]).all() and low < result.difference < high
    assert result.welch_ci95 is None  # one seed on B's side: no spread to test
    sentence = significance.verdict("A", "B", result)
    assert sentence.startswith("`A` is better than `B`")
    assert "bootstrap over 3 and 1 seeds and the 300 test sentences together" in sentence
    assert f"two-sided p = {result.p_value:.3g}" in sentence


def test_identical_systems_get_p_one_with_unequal_seed_counts(systems):
    references, a, _, _ = systems
    results = significance.compare_seeds([a, a, a], [a], references, SAMPLES, TRIALS)
    for unit, result in results.items():
        assert result.p_value == 1.0 and result.ci95 == (0.0, 0.0) and not result.significant
        sentence = significance.verdict("A", "A again", result, unit=unit)
        assert sentence.startswith(
            f"No significant difference between `A` and `A again` in {result.metric}"
        )
        assert "two-sided p = 1 (" in sentence


def test_holm_adjusts_a_textbook_example():
    p_values = [0.01, 0.04, 0.03, 0.005]
    # Sorted: 0.005, 0.01, 0.03, 0.04, times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04; the last may
    # not fall below the one before it, so it becomes 0.06. Back in the given order:
    assert significance.holm(p_values) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert significance.holm([0.5, 0.6]) == [1.0, 1.0]  # 2 x 0.5, capped at 1 from there on
    with pytest.raises(ValueError, match=r"p-values must lie in \[0, 1\]"):
        significance.holm([0.5, float("nan")])


def test_significance_is_decided_by_the_holm_adjusted_p(systems):
    _, a, b, _ = systems
    pair = significance.paired_test(a, b, systems[0], SAMPLES, TRIALS)["BLEU"]
    comparisons = [
        significance.SeedComparison("BLEU", [30.0], [29.0], 1.0, (0.2, 1.8), p, [pair])
        for p in (0.02, 0.03, 0.04)
    ]
    assert all(c.significant for c in comparisons)  # each alone
    adjusted = significance.adjust_for_family(comparisons)
    assert [c.p_adjusted for c in adjusted] == pytest.approx([0.06, 0.06, 0.06])
    assert not any(c.significant for c in adjusted) and adjusted[0].family_size == 3
    sentence = significance.verdict("A", "B", adjusted[0])
    assert sentence.startswith("No significant difference between `A` and `B`")
    assert "two-sided p = 0.02, Holm-adjusted over the report's 3 tests p = 0.06" in sentence
    assert "not after Holm's adjustment" in sentence
