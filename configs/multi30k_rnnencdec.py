"""RNNencdec for German->English Multi30k: ``multi30k_rnnsearch.py`` without attention.

    python train.py --config configs/multi30k_rnnencdec.py --workdir runs/m30k_rnnencdec
    python eval.py --workdir runs/m30k_rnnencdec

Bahdanau et al.'s baseline (after Cho et al. 2014): the decoder reads the source only through one
fixed context vector ``c = tanh(V h_N)`` computed from the encoder's last states, used at every
step. Sizes, data, initialisation and training are those of ``multi30k_rnnsearch.py``, so the pair
isolates attention. Not yet measured; Multi30k's German captions are short (11 words on average),
where Bahdanau et al.'s Figure 2 shows the gap at its smallest.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_RNNSEARCH = Path(__file__).with_name("multi30k_rnnsearch.py")


def get_config():
    config = load_config_file(_RNNSEARCH)
    config.model.rnnsearch.attention = "none"  # RNNencdec: one fixed context vector
    return config
