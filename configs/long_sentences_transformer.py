"""The long_sentences suite, Transformer row: self-attention on the same long sentences.

    python train.py --config configs/long_sentences_transformer.py --workdir runs/long_transformer
    python eval.py --workdir runs/long_transformer

The quickstart Transformer (``quickstart_transformer.py``: sizes, optimizer and schedule) on the
data and budget of ``long_sentences_rnnsearch.py``. Like RNNsearch it reads every source position
at every target step, so its BLEU should hold on long sentences where RNNencdec's falls; the row
puts the Transformer paper's model beside Bahdanau et al.'s Figure 2.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_QUICKSTART = Path(__file__).with_name("quickstart_transformer.py")
_SUITE = Path(__file__).with_name("long_sentences_rnnsearch.py")


def get_config():
    config = load_config_file(_QUICKSTART)
    suite = load_config_file(_SUITE)
    config.data.update(suite.data.to_dict())  # the suite's sentences, batches and buckets
    config.train.steps = suite.train.steps
    config.train.time_budget_minutes = suite.train.time_budget_minutes
    config.eval.update(suite.eval.to_dict())  # validation every 30 s, BLEU by length
    return config
