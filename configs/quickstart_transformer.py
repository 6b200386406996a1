"""A small Transformer on the embedded synthetic task: the quickstart, a few minutes on 2 CPUs.

    python train.py --config configs/quickstart_transformer.py --workdir runs/qs_transformer
    python eval.py --workdir runs/qs_transformer

Expected: 90+ BLEU on the synthetic test split (``make quickstart`` prints the comparison).
"""

from seq2seq.config import default_config


def get_config():
    config = default_config()
    config.model.name = "transformer"
    t = config.model.transformer
    t.d_model = 128  # a quarter of the base model's width
    t.d_ff = 512
    t.num_heads = 4
    t.d_k = 32  # d_model / h, as in the paper
    t.d_v = 32
    t.encoder_layers = 2
    t.decoder_layers = 2
    t.dropout_rate = 0.1

    config.data.source = "synthetic"
    config.data.tokenizer = "word"  # the toy languages are space-separated words
    config.data.vocab_size = 1000  # an upper bound: the toy vocabulary is smaller
    config.data.max_length = 48  # the longest synthetic sentence is 40 words (+ EOS)
    config.data.tokens_per_batch = 2048
    config.data.bucket_width = 16

    config.train.steps = 1500
    config.train.log_every_steps = 50
    config.train.warmup_steps = 300
    config.train.learning_rate = 2.0  # multiplier of the paper's schedule
    config.train.time_budget_minutes = 4.0
    config.checkpoint.every_steps = 500
    config.checkpoint.keep = 2
    return config
