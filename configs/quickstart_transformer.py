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
    t.dropout_rate = 0.0  # the toy data has no noise to overfit in ~8 epochs; dropout slows it

    config.data.source = "synthetic"
    config.data.tokenizer = "word"  # the toy languages are space-separated words
    config.data.vocab_size = 1000  # an upper bound: the toy vocabulary is smaller
    config.data.max_length = 48  # the longest synthetic sentence is 40 words (+ EOS)
    config.data.tokens_per_batch = 1024  # small batches, many updates: best BLEU per CPU-minute
    config.data.bucket_width = 8  # toy sentences are short: fine buckets waste little padding

    config.train.steps = 2000  # sized for the quickstart's minutes (docs/results.md)
    config.train.log_every_steps = 50
    config.train.warmup_steps = 200
    config.train.learning_rate = 0.7  # multiplier of Eq. 3 (peak 4.4e-3 at step 200)
    config.train.time_budget_minutes = 4.5  # a guard for slow machines: stop cleanly, still score
    config.checkpoint.every_steps = 500
    config.checkpoint.keep = 2
    config.eval.every_minutes = 0.5  # validation curves at the same training times for both
    return config
