"""The long_sentences suite, Luong "dot" row: a parameter-free score in place of Bahdanau's.

    python train.py --config configs/long_sentences_rnnsearch_dot.py --workdir runs/long_dot
    python eval.py --workdir runs/long_dot

RNNsearch with Luong et al. 2015's "dot" score ``e_ij = s_{i-1} . h_j`` instead of the additive
alignment model; the decoder is still Bahdanau's (it scores with the previous state ``s_{i-1}``),
as in Britz et al. 2017's comparison. Luong et al. report dot at 18.6 tokenized BLEU on WMT14
EN-DE against 17.3 for general (Table 4). A dot product needs the decoder state as wide as an
annotation, so the encoder has half the quickstart's units per direction (96, annotations of
192 = the decoder's 192); every other size, the data and the budget are those of
``long_sentences_rnnsearch.py``.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_SUITE = Path(__file__).with_name("long_sentences_rnnsearch.py")


def get_config():
    config = load_config_file(_SUITE)
    r = config.model.rnnsearch
    r.attention = "dot"  # Luong et al.: s . h
    r.encoder_hidden_size = r.decoder_hidden_size // 2  # 96 per direction: h_j as wide as s_i
    return config
