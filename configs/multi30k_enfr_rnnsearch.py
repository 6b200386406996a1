"""The Multi30k RNNsearch English -> French (Bahdanau et al.'s pair).

    python train.py --config configs/multi30k_enfr_rnnsearch.py --workdir runs/enfr_rnnsearch
    python eval.py --workdir runs/enfr_rnnsearch --checkpoint average:5

``multi30k_rnnsearch.py`` (width 256, the size the de->en frontier chose) with English as source
and French as target. The same four trials as the other directions (peak x0.5 or x1 of 6e-3,
dropout 0.1 or 0.3; halving at 2,000, 4,000 and 8,000 steps that keeps the best trial of each
dropout to the last rung, ``--tune_keep_each``) chose half de->en's peak, 3e-3, with dropout
0.3: at the first rung x1 with dropout 0.3 lagged (31.70 validation BLEU against 43.53 at half
the peak), and at 8,000 steps x0.5 with 0.3 led x1 with 0.1, which had begun to overfit
(docs/results.md). BLEU is sacreBLEU's default for French (13a, cased). Training ends by early
stopping.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_DE_EN = Path(__file__).with_name("multi30k_rnnsearch.py")


def get_config():
    config = load_config_file(_DE_EN)
    config.data.src_lang, config.data.tgt_lang = "en", "fr"
    config.train.learning_rate = 3e-3  # chosen on en->fr validation (6e-3 in de->en and en->de)
    return config
