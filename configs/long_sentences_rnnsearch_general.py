"""The long_sentences suite, Luong "general" row: a bilinear score in place of Bahdanau's.

    python train.py --config configs/long_sentences_rnnsearch_general.py --workdir runs/long_general
    python eval.py --workdir runs/long_general

RNNsearch with Luong et al. 2015's "general" score ``e_ij = s_{i-1}^T W_a h_j`` instead of the
additive alignment model; the decoder is still Bahdanau's (it scores with the previous state
``s_{i-1}``), so only the scoring function changes, as in Britz et al. 2017's comparison. Luong
et al. report general below dot on WMT14 EN-DE (17.3 against 18.6, Table 4); Britz et al. find
additive slightly but consistently ahead of multiplicative scores. Sizes, data and budget are
those of ``long_sentences_rnnsearch.py``.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_SUITE = Path(__file__).with_name("long_sentences_rnnsearch.py")


def get_config():
    config = load_config_file(_SUITE)
    config.model.rnnsearch.attention = "general"  # Luong et al.: s^T W h
    return config
