"""The scores beside sacreBLEU's: Bahdanau et al.'s BLEU on the sentences without unknown words."""

import ml_collections
import sacrebleu

from seq2seq.data.sources import TextCorpus
from seq2seq.data.tokenizer import MosesWords, train_tokenizer
from seq2seq.evaluation.evaluate import format_report, no_unk_score


def _tokenizer(pairs, directory, model_type):
    return train_tokenizer(
        pairs, model_type=model_type, vocab_size=800, shared=False, directory=directory,
        source_lang="de", target_lang="en",
    )  # fmt: skip


def test_no_unk_bleu_scores_the_sentences_whose_words_are_all_in_the_shortlists(multi30k, tmp_path):
    """Table 1's second column: sentences with no word outside the shortlists, in the source or
    in the reference. The kept sentences are found here from the vocabularies' word lists."""
    tokenizer = _tokenizer(
        TextCorpus(multi30k, "train", "de", "en", limit=3000).pairs(), tmp_path, "word"
    )
    pairs = TextCorpus(multi30k, "val", "de", "en").pairs()[:200]
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    hypotheses = [" ".join(reference.split()[:-2]) for reference in references]  # imperfect
    words = {
        side: {model.id_to_piece(i)[1:] for i in range(4, model.get_piece_size())}
        for side, model in (("de", tokenizer.source), ("en", tokenizer.target))
    }

    def known(text, language):
        return set(MosesWords(language).tokenize(text).split()) <= words[language]

    kept = [i for i in range(200) if known(sources[i], "de") and known(references[i], "en")]
    assert 20 < len(kept) < 180  # some sentences out, some in: the subset is a real choice
    expected = sacrebleu.corpus_bleu([hypotheses[i] for i in kept], [[references[i] for i in kept]])

    result = no_unk_score(tokenizer, sources, hypotheses, references, "en")
    assert result == {"bleu_no_unk": expected.score, "n_no_unk": len(kept)}
    report = format_report(
        {"split": "val", "n": 200, "beam_size": 4, "alpha": 0.6, "checkpoint": "latest",
         "decode_seconds": 1.0, "truncated_inputs": 0, "bleu": 1.0, "signature": "s", "chrf": 1.0,
         "chrf_signature": "c", "tok_bleu": 1.0, "tok_bleu_method": "t",
         "bleu_by_source_length": [], **result}
    )  # fmt: skip
    assert f"no-UNK BLEU     {expected.score:6.2f}  on the {len(kept)} of 200 sentences" in report


def test_a_subword_vocabulary_has_no_unknown_words_and_no_second_column(multi30k, tmp_path):
    pairs = TextCorpus(multi30k, "train", "de", "en", limit=3000).pairs()
    tokenizer = _tokenizer(pairs, tmp_path, "unigram")
    sources, references = [s for s, _ in pairs[:5]], [t for _, t in pairs[:5]]
    assert no_unk_score(tokenizer, sources, references, references, "en") == {}
    assert no_unk_score(None, sources, references, references, "en") == {}


def test_the_report_line_counts_in_words_and_names_sampling_instead_of_a_beam():
    """It said "1 sentences", "1 inputs ... were cut", and "beam 8, alpha 0.6" for samples."""
    facts = {"split": "test", "n": 1, "beam_size": 8, "alpha": 0.6, "checkpoint": "step 9",
             "decode_seconds": 1.0, "compile_seconds": 0.5, "truncated_inputs": 1,
             "max_input_length": 256, "capped_outputs": 1, "max_extra_length": 50}  # fmt: skip
    lines = format_report(facts).splitlines()
    assert lines[0] == "test: 1 sentence, beam 8, alpha 0.6, step 9, 1.0 s (0.5 s of it compiling)"
    assert lines[1] == "  1 input over 256 tokens cut to fit (see truncated_lines)"
    assert lines[2].startswith("  1 translation stopped at the output cap")
    searched = {key: value for key, value in facts.items() if key not in ("beam_size", "alpha")}
    sampled = {**searched, "n": 2, "sampling": "topk:10", "temperature": 1.0, "seed": 3}
    sampled |= {"engine": "jax", "truncated_inputs": 0, "capped_outputs": 0}
    assert format_report(sampled) == (
        "test: 2 sentences, sampling topk:10, temperature 1, seed 3, step 9, 1.0 s (0.5 s of it "
        "compiling)"
    )
    exported = {**facts, "engine": "ctranslate2", "truncated_inputs": 0, "capped_outputs": 0}
    assert "compiling" not in format_report(exported)  # CTranslate2 compiles nothing of JAX's


def test_the_facts_of_a_sampled_translation_name_no_beam():
    """``eval.py --sampling topk:10`` wrote ``"beam_size": 4, "alpha": 0.6`` beside the sampling
    in its JSON: settings that the sampling did not use."""
    from types import SimpleNamespace

    from seq2seq.evaluation.evaluate import decoding_facts
    from seq2seq.evaluation.translator import Sampling, SamplingMethod

    config = ml_collections.ConfigDict(
        {"decode": {"beam_size": 4, "alpha": 0.6}, "eval": {"batch_size": 32}}
    )
    translator = SimpleNamespace(
        config=config, members=[object()], nbest=None, sampling=None,
        describe_checkpoint=lambda: "step 9",
    )  # fmt: skip
    assert decoding_facts(translator)["beam_size"] == 4
    translator.sampling = Sampling(SamplingMethod.parse("topk:10"), 1.0, 3)
    facts = decoding_facts(translator)
    assert "beam_size" not in facts and "alpha" not in facts
    assert (facts["sampling"], facts["temperature"], facts["seed"]) == ("topk:10", 1.0, 3)
