"""The Multi30k RNNsearch in the other direction: English -> German.

    python train.py --config configs/multi30k_ende_rnnsearch.py --workdir runs/ende_rnnsearch
    python eval.py --workdir runs/ende_rnnsearch --checkpoint average:5

``multi30k_rnnsearch.py`` (width 256, the size the de->en frontier chose) with source and target
swapped. The same four trials as de->en (peak x0.5 or x1 of 6e-3, dropout 0.1 or 0.3; halving
at 2,000, 4,000 and 8,000 steps that keeps the best trial of each dropout to the last rung,
``--tune_keep_each``) chose de->en's values again: peak 6e-3 and dropout 0.3 (docs/results.md).
BLEU is sacreBLEU's default for German (13a, cased). Training ends by early stopping.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_DE_EN = Path(__file__).with_name("multi30k_rnnsearch.py")


def get_config():
    config = load_config_file(_DE_EN)
    config.data.src_lang, config.data.tgt_lang = "en", "de"
    return config
