"""RNNencdec on the embedded synthetic task: the quickstart RNN without attention.

    python train.py --config configs/quickstart_rnnencdec.py --workdir runs/qs_rnnencdec
    python eval.py --workdir runs/qs_rnnencdec

Bahdanau et al.'s baseline (after Cho et al. 2014): the decoder sees the source only through one
fixed context vector ``c = tanh(V h_N)`` from the encoder's last states, at every step, instead of
a fresh attention-weighted ``c_i``. Everything else (sizes, encoder, decoder, deep output,
training) is ``quickstart_rnnsearch.py``, so comparing the two shows what attention buys.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_RNNSEARCH = Path(__file__).with_name("quickstart_rnnsearch.py")


def get_config():
    config = load_config_file(_RNNSEARCH)
    config.model.rnnsearch.attention = "none"  # RNNencdec: one fixed context vector
    return config
