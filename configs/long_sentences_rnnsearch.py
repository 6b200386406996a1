"""The long_sentences suite, RNNsearch row: attention keeps BLEU up as sentences grow.

    python train.py --config configs/long_sentences_rnnsearch.py --workdir runs/long_rnnsearch
    python eval.py --workdir runs/long_rnnsearch

The suite reproduces Bahdanau et al. 2015, Figure 2 (BLEU against sentence length) on the
synthetic language, with source sentences spread up to 60+ words. Every row trains the quickstart
sizes for the same 3 minutes on 2 CPU cores; ``eval.py`` reports BLEU by source-length bucket.
This row is the paper's model, additive attention: its BLEU should hold on the longest bucket,
where RNNencdec (``long_sentences_rnnencdec.py``) falls. The other rows read this file's data and
budget, so the suite's settings live here once.
"""

from pathlib import Path

from seq2seq.config import load_config_file

_QUICKSTART = Path(__file__).with_name("quickstart_rnnsearch.py")


def get_config():
    config = load_config_file(_QUICKSTART)  # sizes, optimizer and schedule of the quickstart
    config.model.rnnsearch.attention = "additive"  # Bahdanau et al.

    data = config.data
    data.synthetic_lengths = "uniform"  # every source length equally likely, not mostly short
    data.synthetic_min_words = 3
    data.synthetic_max_words = 64  # Bahdanau et al.'s Figure 2 runs to 60 words
    data.max_length = 80  # tokens, either side: 64 words, EOS and a few target words to spare
    data.tokens_per_batch = 1024  # as the quickstart: longer sentences, fewer per batch
    data.bucket_width = 16  # padded lengths 16, 32, ..., 80: five compiled shapes

    config.train.steps = 100_000  # more than fit: the time budget ends every row alike
    config.train.time_budget_minutes = 3.0  # the suite's equal budget per row (2 CPU cores)
    config.eval.every_steps = 0  # validation by training time only (every 30 s, as the quickstart)
    config.eval.length_bucket_size = 10  # BLEU per 10 source words (Bahdanau et al., Fig. 2)
    return config
