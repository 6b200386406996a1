"""A translation direction is a record's own: its target language picks the reference file that
scores it and the BLEU tokenizer sacreBLEU uses for that language by default."""

from pathlib import Path

import pytest

from seq2seq import config as config_lib
from seq2seq.compare import frontier
from seq2seq.evaluation import significance
from seq2seq.evaluation.bleu import bleu_by_source_length, sacrebleu_score


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
