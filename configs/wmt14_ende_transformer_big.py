"""Transformer big on WMT14 English→German (Vaswani et al. 2017, Table 3 "big").

    python train.py --config configs/wmt14_ende_transformer_big.py --workdir runs/ende_big
    python eval.py --workdir runs/ende_big --checkpoint average:20

Paper: 28.4 BLEU on newstest2014 (tokenized, compound-split); 300k steps at 1.0 s/step,
3.5 days on 8 P100s. About 214M parameters with a 37k shared vocabulary (the paper: 213M).
"""

from pathlib import Path

from seq2seq.config import load_config_file

_BASE = Path(__file__).with_name("wmt14_ende_transformer_base.py")


def get_config():
    config = load_config_file(_BASE)
    t = config.model.transformer
    t.d_model = 1024
    t.d_ff = 4096
    t.num_heads = 16
    t.d_k = t.d_v = 64  # d_model / h
    t.dropout_rate = 0.3  # EN-DE big (0.1 for EN-FR)
    config.train.steps = 300_000
    config.checkpoint.keep = 20  # the big models average the last 20
    return config
