"""The report's markdown table: every value formatted, seeds as mean ± sample std (max)."""

import pytest

from seq2seq.report.tables import markdown_table, mean_std_max

COLUMNS = [
    ("name", "run", ""),
    ("bleu", "sacreBLEU", ".2f"),
    ("parameters", "parameters", ",d"),
    ("train_flops", "FLOPs", ".2e"),
    ("status", "status", lambda value: value.upper()),
]


def test_each_value_appears_formatted_in_its_column():
    rows = [
        {"name": "transformer", "bleu": 36.04, "parameters": 9_530_368, "train_flops": 3.1e15,
         "status": "done"},
        {"name": "rnnsearch", "bleu": [33.0, 35.0], "parameters": 12_000, "status": "done"},
        {"name": "broken", "bleu": "failed: NaN loss | step 40", "status": "failed"},
    ]  # fmt: skip
    lines = markdown_table(rows, COLUMNS).splitlines()
    assert lines[0] == "| run | sacreBLEU | parameters | FLOPs | status |"
    assert lines[1] == "|---|---|---|---|---|"
    assert lines[2] == "| transformer | 36.04 | 9,530,368 | 3.10e+15 | DONE |"
    # std of [33, 35] with ddof=1: sqrt(((33 - 34)^2 + (35 - 34)^2) / 1) = 1.414...
    assert lines[3] == "| rnnsearch | 34.00 ± 1.41 (max 35.00) | 12,000 | — | DONE |"
    assert lines[4] == "| broken | failed: NaN loss \\| step 40 | — | — | FAILED |"
    assert len(lines) == 5


def test_mean_and_sample_std_of_seeds():
    assert mean_std_max([1, 3]).startswith("2.00 ± 1.41")
    assert mean_std_max([1, 3]) == "2.00 ± 1.41 (max 3.00)"
    assert mean_std_max([4.0, 2.0, 6.0], ".1f", best="min") == "4.0 ± 2.0 (min 2.0)"
    assert mean_std_max([1, 3], best="") == "2.00 ± 1.41"


def test_seeds_without_a_result_are_counted_not_averaged():
    assert mean_std_max([1.0, None, 3.0]) == "2.00 ± 1.41 (max 3.00) [2 of 3 seeds]"
    assert mean_std_max([5.0]) == "5.00"
    assert mean_std_max([None, None]) == "—"


def test_a_wrong_best_is_named():
    with pytest.raises(ValueError, match="best='mean'"):
        mean_std_max([1, 2], best="mean")


def test_the_reports_columns_show_several_seeds_each_by_its_own_rule():
    """The report's (and compare_models.ipynb's) columns on a config of two seeds: parameters
    per seed, BLEU with its highest seed, perplexity with its lowest (the best, not the worst)."""
    from seq2seq.compare.report_sections import COLUMNS as REPORT_COLUMNS

    shown = [c for c in REPORT_COLUMNS if c[0] in ("bleu", "params", "best_validation_perplexity")]
    row = {
        "bleu": [33.0, 35.0],
        "params": [960_512, 960_512],
        "best_validation_perplexity": [4.5, 3.5],
    }
    assert markdown_table([row], shown).splitlines()[2] == (
        "| 34.00 ± 1.41 (max 35.00) | 0.96M / 0.96M | 4.00 ± 0.71 (min 3.50) |"
    )
    one = {"bleu": 33.0, "params": 960_512, "best_validation_perplexity": 4.5}
    assert markdown_table([one], shown).splitlines()[2] == "| 33.00 | 0.96M | 4.50 |"
