"""A small RNNsearch on the embedded synthetic task: the quickstart's recurrent half.

    python train.py --config configs/quickstart_rnnsearch.py --workdir runs/qs_rnnsearch
    python eval.py --workdir runs/qs_rnnsearch

The architecture is the paper's (bidirectional GRU encoder, additive attention, GRU decoder,
maxout deep output) at a fifth of its width. It trains with Adam rather than the paper's AdaDelta,
which is too slow for a few minutes on a CPU (``configs/wmt14_enfr_rnnsearch50.py`` keeps AdaDelta),
from fan-in scaled weights rather than Appendix B.1's (``init`` below says why).
"""

from seq2seq.config import default_config


def get_config():
    config = default_config()
    config.model.name = "rnnsearch"
    r = config.model.rnnsearch
    r.embedding_size = 128
    r.encoder_hidden_size = 192  # per direction
    r.decoder_hidden_size = 192
    r.alignment_size = 192
    r.maxout_size = 128
    r.share_embeddings = True
    # Fan-in scaled weights, not Appendix B.1's N(0, 0.01^2), whose tiny weights leave Adam a
    # long way to go in a quickstart's few hundred steps (docs/results.md, "RNNsearch's
    # initialisation").
    r.init = "modern"

    config.data.source = "synthetic"
    config.data.tokenizer = "word"
    config.data.vocab_size = 1000
    config.data.max_length = 48
    config.data.tokens_per_batch = 1024
    config.data.bucket_width = 8

    config.train.steps = 1300  # sized for the quickstart's minutes (docs/results.md)
    config.train.log_every_steps = 50
    config.train.optimizer = "adam"
    config.train.schedule = "warmup_rsqrt"
    config.train.learning_rate = 3e-3
    config.train.warmup_steps = 100
    config.train.label_smoothing = 0.0  # Bahdanau et al. use none
    config.train.clip_grad_norm = 1.0  # as in the paper
    config.train.time_budget_minutes = 4.5
    config.checkpoint.every_steps = 500
    config.checkpoint.keep = 2
    config.eval.every_minutes = 0.5  # validation curves at the same training times for both
    return config
