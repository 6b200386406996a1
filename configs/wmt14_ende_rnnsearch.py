"""RNNsearch on WMT14 English→German: the same data and vocabulary as the Transformer configs.

    python train.py --config configs/wmt14_ende_rnnsearch.py --workdir runs/ende_rnnsearch

Bahdanau et al. evaluate on English→French only; this variant puts RNNsearch on the Transformer's
data (shared 37k BPE vocabulary, newstest2014) for a same-data comparison. Luong et al. 2015 report
16.8–20.9 tokenized BLEU for attentional RNNs on this test set.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_PAPER = Path(__file__).with_name("wmt14_enfr_rnnsearch50.py")


def get_config():
    config = load_config_file(_PAPER)
    data = config.data
    data.name = "wmt14_translate/de-en"
    data.src_lang, data.tgt_lang = "en", "de"
    data.tokenizer = "bpe"  # as the Transformer: subwords, so no UNK
    data.vocab_size = 37000
    data.shared_vocab = True
    data.max_length = 256  # the Transformer's filter, in subwords (not the paper's 50 words)
    data.bucket_width = 32
    config.model.rnnsearch.share_embeddings = False  # the paper's separate embedding tables
    return config
