"""The long_sentences suite, RNNencdec row: without attention, BLEU falls with length.

    python train.py --config configs/long_sentences_rnnencdec.py --workdir runs/long_rnnencdec
    python eval.py --workdir runs/long_rnnencdec

Bahdanau et al.'s baseline (after Cho et al. 2014): the decoder reads the source only through one
fixed context vector ``c = tanh(V h_N)``. Its BLEU should fall as source sentences grow, as
RNNencdec's does in Bahdanau et al. 2015, Figure 2, while the attending rows hold. Sizes, data
and budget are those of ``long_sentences_rnnsearch.py``; only the attention differs.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_SUITE = Path(__file__).with_name("long_sentences_rnnsearch.py")


def get_config():
    config = load_config_file(_SUITE)
    config.model.rnnsearch.attention = "none"  # RNNencdec: one fixed context vector
    return config
