"""Paired significance tests: sacreBLEU's own numbers, identical systems never significant, a
clear difference found in the right direction, and the spread over seeds."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sacrebleu.metrics import BLEU
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


def test_seeds_are_compared_by_their_spread_and_every_pair_is_tested(systems):
    references, a, b, c = systems
    result = significance.compare_seeds([a, c], [b, b], references, SAMPLES, TRIALS)["BLEU"]
    assert len(result.pairs) == 4
    bleu = [p.score_a for p in significance.paired_test(a, b, references, SAMPLES, 10).values()]
    assert result.scores_a[0] == pytest.approx(bleu[0])
    assert result.difference == pytest.approx(np.mean(result.scores_a) - np.mean(result.scores_b))
    # B's two seeds are one system: no spread on its side, A's two differ; Welch's t-test then
    # rests on A's spread alone (df = 1), so its interval is wide.
    low, high = result.ci95
    assert low < result.difference < high
    assert high - low > 2 * abs(result.scores_a[0] - result.scores_a[1])
    assert result.pairs_significant == 4
