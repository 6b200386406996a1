"""CTranslate2 export: the exported model computes this package's probabilities; bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import ctranslate2
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq.config import default_config
from seq2seq.data.tokenizer import train_tokenizer
from seq2seq.export.converter import export
from seq2seq.models import Transformer, TransformerConfig
from seq2seq.records.run_directory import RunDirectory
from seq2seq.vocabulary import BOS_ID, EOS_ID
from tests.conftest import REPO

WORDS = [
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "the",
    "mat",
    "big",
    "small",
    "red",
    "tree",
    "house",
    "near",
    "far",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    rng = np.random.default_rng(0)
    pairs = [(" ".join(rng.choice(WORDS, 6)), " ".join(rng.choice(WORDS, 5))) for _ in range(200)]
    directory = tmp_path_factory.mktemp("tokenizer")
    return directory, train_tokenizer(
        pairs, model_type="word", vocab_size=len(WORDS) + 4, shared=True, directory=directory,
        source_lang="en", target_lang="de",
    )  # fmt: skip


VARIANTS = {
    "post-LN, sinusoidal, shared and tied": {},
    "pre-LN, learned positions, separate": {
        "norm": "pre",
        "positions": "learned",
        "max_positions": 128,
        "share_embeddings": False,
        "tie_output": False,
    },  # fmt: skip
    "unscaled embeddings": {"scale_embeddings": False, "norm": "pre"},
}


def _model(vocab: int, **fields) -> Transformer:
    config = TransformerConfig(
        vocab, vocab, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8, encoder_layers=2,
        decoder_layers=2, **fields,
    )  # fmt: skip
    graphdef, params = nnx.split(Transformer(config, rngs=nnx.Rngs(0)))
    rng = np.random.default_rng(1)  # every parameter random (layer norms and biases included)
    params = jax.tree.map(lambda p: rng.normal(0, 0.5, p.shape).astype(np.float32), params)
    return nnx.merge(graphdef, params)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_exported_model_gives_this_package_s_log_probabilities(variant, tokenizer, tmp_path):
    directory, tok = tokenizer
    model = _model(tok.target_vocab_size, **VARIANTS[variant])
    config = default_config()
    export(model, directory, tok, config, tmp_path / "model")
    rng = np.random.default_rng(2)
    sources = [" ".join(rng.choice(WORDS, n)) for n in (3, 7, 5, 9)]
    targets = [" ".join(rng.choice(WORDS, n)) for n in (4, 2, 8, 6)]
    source_ids, target_ids = tok.encode_source(sources), tok.encode_target(targets)  # EOS ended
    pieces = tok.source.id_to_piece
    scored = ctranslate2.Translator(str(tmp_path / "model")).score_batch(
        [[pieces(int(i)) for i in ids] for ids in source_ids],
        [[tok.target.id_to_piece(int(i)) for i in ids[:-1]] for ids in target_ids],  # + EOS
    )
    for source, target, result in zip(source_ids, target_ids, scored, strict=True):
        inputs = np.concatenate([[BOS_ID], target[:-1]])[None]
        logits, _ = model(jnp.asarray(source[None]), jnp.asarray(inputs))
        log_probs = np.asarray(jax.nn.log_softmax(logits[0], axis=-1))
        expected = log_probs[np.arange(len(target)), target]
        assert target[-1] == EOS_ID and len(result.log_probs) == len(target)
        np.testing.assert_allclose(result.log_probs, expected, rtol=1e-4, atol=1e-4)


def _export_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.export", *map(str, args)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _run_directory(path, model_name):
    path.mkdir()
    config = default_config()
    config.model.name = model_name
    RunDirectory(path).save_config(config)
    return path


@pytest.mark.parametrize(
    ("model_name", "args", "message"),
    [
        ("rnnsearch", [], "CTranslate2 has no rnnsearch model"),
        ("transformer", ["--quantization", "int4"], "unknown --quantization 'int4'"),
    ],
)
def test_what_cannot_be_exported_is_one_line(model_name, args, message, tmp_path):
    run = _run_directory(tmp_path / "run", model_name)
    result = _export_cli("--workdir", run, "--output", tmp_path / "out", *args)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


def test_an_output_under_a_file_is_one_line_and_the_file_is_left_alone(tmp_path):
    run = _run_directory(tmp_path / "run", "transformer")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    for output, where in (
        (notes, "is a file"),
        (notes / "out", f"lies under {notes}, which is a file"),
    ):
        result = _export_cli("--workdir", run, "--output", output)
        assert result.returncode == 1
        assert result.stderr.strip().splitlines() == [
            f"error: --output {output} {where}, not a directory; name a new directory (the file "
            "was left as it is)"
        ]
        assert notes.read_text() == "mine\n"


def test_an_exported_directory_records_the_decoding_settings(tokenizer, tmp_path):
    directory, tok = tokenizer
    config = default_config()
    config.decode.beam_size = 3
    export(_model(tok.target_vocab_size), directory, tok, config, tmp_path / "m", "int8")
    settings = json.loads((tmp_path / "m" / "seq2seq.json").read_text())
    assert settings["quantization"] == "int8" and settings["config"]["decode"]["beam_size"] == 3
    assert (tmp_path / "m" / "tokenizer").is_dir() and (tmp_path / "m" / "model.bin").is_file()


def test_exported_beams_are_ranked_by_this_package_s_length_penalty(tokenizer, tmp_path):
    from seq2seq.decoding.beam_search import length_penalty
    from seq2seq.decoding.search_parts import NEVER_OUTPUT
    from seq2seq.export.engine import ExportedTranslator

    directory, tok = tokenizer
    model = _model(tok.target_vocab_size)
    config = default_config()
    config.decode.max_extra_length = 6
    export(model, directory, tok, config, tmp_path / "model")
    translator = ExportedTranslator(tmp_path / "model", beam_size=4, nbest=4, threads=1)
    rng = np.random.default_rng(3)
    sources = [" ".join(rng.choice(WORDS, n)) for n in (3, 7, 5, 9, 4)]
    checked = 0
    for source, nbest in zip(sources, translator.translate(sources).nbest, strict=True):
        scores = [score for score, _ in nbest]
        assert scores == sorted(scores, reverse=True)
        source_ids = tok.encode_source([source])[0]
        for score, text in nbest:
            target = tok.encode_target([text])[0]  # EOS ended
            if tok.decode_target(target) != text or len(target) > len(source_ids) + 6:
                continue  # an <unk> that does not round-trip, or an output cut at its limit
            inputs = np.concatenate([[BOS_ID], target[:-1]])[None]
            logits, _ = model(jnp.asarray(source_ids[None]), jnp.asarray(inputs))
            # CTranslate2 removes the suppressed ids (padding, BOS) before its softmax.
            logits = logits[0].at[:, list(NEVER_OUTPUT)].set(-jnp.inf)
            log_probs = np.asarray(jax.nn.log_softmax(logits, axis=-1))
            log_p = log_probs[np.arange(len(target)), target].sum()
            expected = log_p / float(length_penalty(len(target), 0.6))
            np.testing.assert_allclose(score, expected, rtol=1e-3, atol=1e-3)
            checked += 1
    assert checked >= 5, "too few outputs could be rescored for the test to mean anything"


def _runaway_model(vocab: int) -> Transformer:
    """A random model that rarely ends a sentence: its outputs run to their length limit."""
    model = _model(vocab, tie_output=False, share_embeddings=False)
    kernel = 3 * np.asarray(model.output_projection.kernel[...])
    kernel[:, EOS_ID] = 0.0  # EOS's logit 0 against the others' spread of about 6
    model.output_projection.kernel[...] = kernel
    return model


def test_a_sentence_s_exported_beam_does_not_depend_on_the_rest_of_its_batch(tokenizer, tmp_path):
    """CTranslate2 takes one length limit per batch: short sentences whose beams run to their own
    limit, decoded beside a long one, keep the hypotheses and scores they have alone."""
    from seq2seq.export.engine import ExportedTranslator

    directory, tok = tokenizer
    config = default_config()
    config.decode.max_extra_length = 3
    export(_runaway_model(tok.target_vocab_size), directory, tok, config, tmp_path / "model")
    translator = ExportedTranslator(tmp_path / "model", beam_size=3, nbest=3, threads=1)
    rng = np.random.default_rng(4)
    shorts = [" ".join(rng.choice(WORDS, 2)) for _ in range(6)]
    translator.config.eval.batch_size = 1
    alone = translator.translate(shorts).nbest
    translator.config.eval.batch_size = len(shorts) + 1
    beside = translator.translate([*shorts, " ".join(rng.choice(WORDS, 12))]).nbest[:-1]
    limit = len(tok.encode_source([shorts[0]])[0]) + 3  # tokens, EOS included
    cut = [text for nbest in alone for _, text in nbest if len(text.split()) == limit]
    assert len(cut) > len(shorts), "too few beams reached their limit for the test to mean much"
    for together, apart in zip(beside, alone, strict=True):
        # sorted: hypotheses of equal score may come in either order
        assert sorted(text for _, text in together) == sorted(text for _, text in apart)
        np.testing.assert_allclose(
            sorted(s for s, _ in together), sorted(s for s, _ in apart), atol=1e-4
        )


def test_every_transformer_field_is_exported_or_changes_no_translation():
    """A field the converter does not know (a new hyperparameter) is caught here first, and a
    run using it is refused, not exported as if it had its default (a GELU feed-forward was
    exported as ReLU and translated otherwise)."""
    import dataclasses

    from seq2seq.export.converter import EXPORTED_FIELDS, TRAINING_ONLY_FIELDS, check_exportable

    fields = {field.name for field in dataclasses.fields(TransformerConfig)}
    assert fields == EXPORTED_FIELDS | TRAINING_ONLY_FIELDS
    assert not EXPORTED_FIELDS & TRAINING_ONLY_FIELDS
    extended = dataclasses.make_dataclass(
        "Extended", [("activation", str, "relu")], bases=(TransformerConfig,), frozen=True
    )
    check_exportable("transformer", extended(8, 8, d_model=8, d_ff=8, num_heads=2, d_k=4, d_v=4))
    with pytest.raises(ValueError) as error:
        check_exportable(
            "transformer",
            extended(8, 8, d_model=8, d_ff=8, num_heads=2, d_k=4, d_v=4, activation="gelu"),
        )
    assert str(error.value) == (
        "model.transformer.activation='gelu' is not carried by the CTranslate2 export (it would "
        "build the model as if activation='relu'); teach seq2seq/export/converter.py the field "
        "first"
    )
