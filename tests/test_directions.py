"""A translation direction is a record's own: its target language picks the reference file that
scores it and the BLEU tokenizer sacreBLEU uses for that language by default."""

import dataclasses
import json
from pathlib import Path

import pytest

from seq2seq import config as config_lib
from seq2seq.compare import directions, frontier, published
from seq2seq.evaluation import significance
from seq2seq.evaluation.bleu import bleu_by_source_length, sacrebleu_score
from tests.conftest import REPO, config_differences


def _record(multi30k: Path, source: str, target: str) -> frontier.RunRecord:
    config = config_lib.default_config()
    config_lib.use_multi30k(config.data, multi30k)
    config.data.src_lang, config.data.tgt_lang = source, target
    return frontier.RunRecord(
        name="transformer-small-seed0",
        config_name="transformer-small",
        family="transformer",
        seed=0,
        curve=(),
        stop_reason="converged",
        steps=0,
        minutes=0.0,
        flops=0.0,
        result={"split": "test_2016_flickr", "max_sentences": 4},
        hypotheses=(),
        config=config,
    )


@pytest.mark.parametrize("source, target", [("de", "en"), ("en", "de"), ("en", "fr")])
def test_a_records_target_language_picks_its_references(multi30k, source, target):
    lines = (multi30k / f"test_2016_flickr.{target}").read_text(encoding="utf-8").splitlines()
    references = frontier.references_for(_record(multi30k, source, target))
    assert references == lines[:4]
    others = {lang for lang in ("de", "en", "fr") if lang != target}
    for other in others:  # the captions differ between languages: the file was not another's
        text = (multi30k / f"test_2016_flickr.{other}").read_text(encoding="utf-8")
        assert references != text.splitlines()[:4]


def test_the_bleu_tokenizer_is_sacrebleus_default_for_the_target_language():
    # Chinese has no spaces between words: 13a sees one token a line, sacreBLEU's "zh"
    # tokenizer one a character, so a half-right hypothesis scores 0 only under 13a.
    hypotheses, references = ["我们喜欢猫和狗"], ["我们喜欢猫和鸟"]
    chinese = sacrebleu_score(hypotheses, references, "zh")
    assert "tok:zh" in chinese["signature"] and chinese["bleu"] > 40
    assert sacrebleu_score(hypotheses, references)["bleu"] == 0.0
    for target in ("en", "de", "fr"):  # the three Multi30k languages: 13a, as without one
        score = sacrebleu_score(["Ein Hund läuft ."], ["Ein Hund rennt ."], target)
        assert "tok:13a" in score["signature"]
    rows = bleu_by_source_length(["a b"], hypotheses, references, 10, "zh")
    assert rows[0]["bleu"] == pytest.approx(chinese["bleu"])
    tested = significance.compare_seeds(
        [hypotheses * 4], [references * 4], references * 4, 20, 20, target_lang="zh"
    )
    assert tested["BLEU"].scores_a == [pytest.approx(chinese["bleu"])]


# One verdict across directions, on made-up records over a made-up test set.

SENTENCES = [
    f"the {w} dog runs across the green field number {i}"
    for i, w in enumerate(
        ["black", "white", "brown", "small", "big", "old", "young", "wet", "happy", "lazy"] * 3
    )
]


def _scored_run(data_dir: Path, source: str, target: str, family: str, seed: int, hyps):
    record = _record(data_dir, source, target)
    record.config.data.test_split = "test"
    config = record.config
    config.model.name = family
    curve = (frontier.Point(100, 1.0, 1e12, 20.0), frontier.Point(200, 2.0, 2e12, 30.0 + seed))
    return dataclasses.replace(
        record,
        name=f"{family}-small-seed{seed}",
        config_name=f"{family}-small",
        family=family,
        seed=seed,
        curve=curve,
        flops=2e12,
        result={"split": "test", "bleu": 0.0, "chrf": 0.0},
        hypotheses=tuple(hyps),
    )


def _dropout_tuning(chosen: float) -> dict:
    """A run's tuning record (``tuning.json``) over dropout {0.1, 0.3} that chose ``chosen``."""
    return {
        "grid": {"model.dropout_rate": [0.1, 0.3]},
        "models": [{"chosen": {"model.dropout_rate": chosen}}],
    }


def test_one_verdict_holm_adjusts_every_directions_tests_together(tmp_path):
    (tmp_path / "test.en").write_text("\n".join(SENTENCES) + "\n")
    for lang in ("de", "fr"):
        (tmp_path / f"test.{lang}").write_text("\n".join(SENTENCES) + "\n")
    garbled = [s.replace("dog", "cat").replace("field", "road") for s in SENTENCES]
    folders = []
    for source, target, worse in (("de", "en", True), ("en", "fr", False)):
        runs = [
            _scored_run(tmp_path, source, target, "rnnsearch", seed, SENTENCES) for seed in (0, 1)
        ] + [
            _scored_run(
                tmp_path, source, target, "transformer", seed, garbled if worse else SENTENCES
            )
            for seed in (0, 1)
        ]
        # Each direction tuned its own dropout: RNNsearch chose the grid's top in both.
        runs = [
            dataclasses.replace(run, tuning=_dropout_tuning(0.3 if not worse or i < 2 else 0.1))
            for i, run in enumerate(runs)
        ]
        folders.append((directions.direction_of(runs), runs))
    assert [name for name, _ in folders] == ["de->en", "en->fr"]
    data = directions.directions_data(folders)
    assert data["tests"] == 4
    de_en, en_fr = data["rows"]
    assert de_en["BLEU"]["difference"] > 20 and de_en["BLEU"]["significant"]
    assert en_fr["BLEU"]["difference"] == 0 and not en_fr["BLEU"]["significant"]
    for row in data["rows"]:  # adjusted over the four tests: never below the raw p
        for metric in ("BLEU", "chrF"):
            assert row[metric]["p_value_holm"] >= row[metric]["p_value"]
    # Both families' made-up curves are the same: the FLOPs to a level do not separate them.
    said = directions.reading(de_en)
    assert said["better"]["BLEU"] == "rnnsearch" and not said["level"] and not said["holds"]
    said = directions.reading(en_fr)
    assert said == {"better": {}, "level": True, "cheaper": None, "holds": False}
    text = directions.render(data)
    assert "| rnnsearch better (BLEU" in text and "| level; FLOPs not separated |" in text
    assert '"Level at convergence, transformer cheaper" holds in 0 of 2 directions:' in text
    assert data["grid_edges"] == [
        "rnnsearch, in every direction (2), chose the largest `model.rnnsearch.dropout_rate` of "
        "the grid (0.3)"
    ]
    assert "**At the end of the grid**: rnnsearch, in every direction (2), chose" in text
    published = text.split("## Published results on test_2016_flickr")[1]
    assert "- en->fr:\n  - 59.7: Transformer, text-only; lowercased" in published
    assert "en->de" not in published  # only the table's directions


def test_published_results_say_how_they_were_scored_and_which_match_ours():
    for direction in ("de->en", "en->de", "en->fr"):
        entries = published.published_for(direction)
        assert entries, direction
        assert [p.bleu for p in entries] == sorted((p.bleu for p in entries), reverse=True)
        # each direction has one number scored as the records are (cased sacreBLEU), and every
        # Multi30k-only number states its casing
        assert any("as here" in p.scoring for p in entries), direction
        for p in entries:
            assert ("lowercased" in p.scoring) or ("cased" in p.scoring), p
    lines = published.published_section(["de->en", "xx->yy"])
    assert "- xx->yy: no published test_2016_flickr result is listed." in lines
    assert "- de->en: (none trained on Multi30k alone)" in lines
    assert "- en->fr:" in published.published_section(["en->fr"])


def _row(bleu: tuple[float, bool], chrf: tuple[float, bool], ratio_ci95) -> dict:
    cost = None if ratio_ci95 is None else {"level": 40.0, "ratio": 1.5, "ratio_ci95": ratio_ci95}
    return {
        "families": ["rnnsearch", "transformer"],
        "BLEU": {"difference": bleu[0], "significant": bleu[1]},
        "chrF": {"difference": chrf[0], "significant": chrf[1]},
        "cost": cost,
    }


LEVEL = (0.02, False)
TRANSFORMER = "transformer"


@pytest.mark.parametrize(
    "row, said",
    [
        (_row(LEVEL, LEVEL, (1.37, 1.93)), ({}, TRANSFORMER, True)),
        (_row((-1.34, True), LEVEL, (1.37, 1.93)), ({"BLEU": TRANSFORMER}, TRANSFORMER, False)),
        # significant in chrF alone is not level
        (
            _row((-1.31, False), (-1.52, True), (2.5, 3.4)),
            ({"chrF": TRANSFORMER}, TRANSFORMER, False),
        ),
        (_row((-1.34, True), LEVEL, (0.90, 1.73)), ({"BLEU": TRANSFORMER}, None, False)),
        (
            _row((0.8, True), (0.6, True), (0.5, 0.9)),
            ({"BLEU": "rnnsearch", "chrF": "rnnsearch"}, "rnnsearch", False),
        ),
        (_row(LEVEL, LEVEL, None), ({}, None, False)),
        (_row(LEVEL, LEVEL, (0.6, 1.0)), ({}, None, False)),  # an interval touching parity
    ],
)
def test_a_row_holds_only_when_level_in_both_metrics_and_the_transformer_clearly_cheaper(row, said):
    better, cheaper, holds = said
    got = directions.reading(row)
    assert (got["better"], got["cheaper"], got["holds"]) == (better, cheaper, holds)
    assert got["level"] == (not better)


def test_a_folder_that_mixes_directions_is_refused_in_one_line(tmp_path):
    runs = [
        _scored_run(tmp_path, "de", "en", "rnnsearch", 0, ["x"]),
        _scored_run(tmp_path, "en", "de", "transformer", 0, ["x"]),
    ]
    with pytest.raises(ValueError, match="mixes de->en, en->de: give each direction its own"):
        directions.direction_of(runs)
    one_family = [_scored_run(tmp_path, "de", "en", "rnnsearch", 0, ["x"])]
    with pytest.raises(ValueError, match="needs converged, scored runs of two families"):
        directions.directions_data([("de->en", one_family)])
    unscored = [dataclasses.replace(run, result=None) for run in runs]
    with pytest.raises(
        ValueError,
        match="has runs of rnnsearch, transformer; converged and "
        "scored: none\\); train them to convergence and score them first",
    ):
        directions.directions_data([("de->en", unscored)])


# Each shipped Multi30k config and the committed records it reproduces (their seeds). Only the
# seed, where the data lies and the caps may differ, the caps only for runs that converged
# (early stopping ended them, not the cap). Keys added to the config since a record was written
# may differ too where they hold their default (the behaviour before them).
SHIPPED = [
    ("multi30k_transformer.py", "multi30k_frontier_tuned", "transformer-small"),
    ("multi30k_rnnsearch.py", "multi30k_frontier_tuned", "rnnsearch-medium"),
    ("multi30k_ende_transformer.py", "multi30k_ende", "transformer-small"),
    ("multi30k_ende_rnnsearch.py", "multi30k_ende", "rnnsearch-medium"),
    ("multi30k_enfr_transformer.py", "multi30k_enfr", "transformer-small"),
    ("multi30k_enfr_rnnsearch.py", "multi30k_enfr", "rnnsearch-medium"),
]
MAY_DIFFER = {"seed", "data.dir", "train.steps", "train.time_budget_minutes"}


@pytest.mark.parametrize("config_file, folder, size", SHIPPED)
def test_each_shipped_config_trains_what_its_direction_s_records_trained(config_file, folder, size):
    config = config_lib.load_config_file(REPO / "configs" / config_file)
    records = sorted((REPO / "docs" / "records" / folder).glob(f"{size}-seed*"))
    assert records, f"{folder} holds no seed of {size}"
    for record in records:
        differ = config_differences(config, record)
        assert differ.keys() <= MAY_DIFFER, differ
        stop = json.loads((record / "metrics.jsonl").read_text().splitlines()[-1])
        assert stop["kind"] == "stop" and stop["reason"] == "converged", record.name
