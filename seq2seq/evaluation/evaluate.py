"""Translate a split with a trained model and score it: what ``eval.py`` runs."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import ml_collections
from flax import nnx

from seq2seq import config as config_lib
from seq2seq.data.batching import inference_batches
from seq2seq.data.pipeline import TOKENIZER_DIR, load_pairs
from seq2seq.data.tokenizer import Tokenizer, load_tokenizer
from seq2seq.decoding.greedy import greedy_search
from seq2seq.evaluation.bleu import sacrebleu_score
from seq2seq.training.checkpoints import Checkpoints
from seq2seq.training.trainer import CONFIG_FILE, create_state


class Translator:
    """A restored model with its tokenizer, translating lists of sentences."""

    def __init__(self, config: ml_collections.ConfigDict, tokenizer: Tokenizer, params, graphdef):
        self.config = config
        self.tokenizer = tokenizer
        self.params = params

        def search(params, source, max_length):
            return greedy_search(nnx.merge(graphdef, params), source, max_length)

        self._search = jax.jit(search, static_argnums=2)

    @classmethod
    def restore(cls, workdir: Path, step: int | None = None) -> Translator:
        """Loads config, tokenizer and (latest, or ``step``) parameters from a work directory."""
        config = config_lib.load_saved(workdir / CONFIG_FILE)
        tokenizer = load_tokenizer(workdir / TOKENIZER_DIR)
        if tokenizer is None:
            raise FileNotFoundError(f"no tokenizer in {workdir / TOKENIZER_DIR}; train first")
        template, _ = create_state(config, tokenizer.source_vocab_size, tokenizer.target_vocab_size)
        checkpoints = Checkpoints(workdir, keep=config.checkpoint.keep)
        if checkpoints.latest_step() is None:
            raise FileNotFoundError(f"no checkpoint in {workdir}; train first")
        state, _ = checkpoints.restore(template, step)
        checkpoints.close()
        return cls(config, tokenizer, state.params, state.graphdef)

    def translate(self, sentences: Sequence[str]) -> tuple[list[str], int]:
        """Translations in input order, and how many inputs had to be truncated."""
        limit = self.config.decode.max_input_length
        sources = self.tokenizer.encode_source(sentences)
        truncated = sum(len(ids) > limit for ids in sources)
        outputs: list[str] = [""] * len(sources)
        batches = inference_batches(
            sources, self.config.eval.batch_size, self.config.data.bucket_width, limit
        )
        for indices, source in batches:
            max_length = source.shape[1] + self.config.decode.max_extra_length
            tokens = jax.device_get(self._search(self.params, source, max_length))
            for row, index in enumerate(indices):
                outputs[index] = self.tokenizer.decode_target(tokens[row])
        return outputs, truncated


def evaluate(workdir: Path, split: str | None = None, step: int | None = None) -> dict:
    """Translates ``split`` (default: the config's test split), writes and scores it.

    Writes ``eval/SPLIT.hyp.txt`` (line i translates source line i) and ``eval/SPLIT.json``.
    """
    translator = Translator.restore(workdir, step)
    split = split or translator.config.data.test_split
    pairs = load_pairs(translator.config, split)
    start = time.monotonic()
    hypotheses, truncated = translator.translate([source for source, _ in pairs])
    seconds = time.monotonic() - start
    result = {
        **sacrebleu_score(hypotheses, [target for _, target in pairs]),
        "n": len(pairs),
        "split": split,
        "truncated_inputs": truncated,
        "decode_seconds": seconds,
    }
    out_dir = workdir / "eval"
    out_dir.mkdir(exist_ok=True)
    (out_dir / f"{split}.hyp.txt").write_text("".join(h + "\n" for h in hypotheses))
    (out_dir / f"{split}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
