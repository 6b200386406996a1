"""Transformer base on WMT14 English→German (Vaswani et al. 2017, Table 3 "base").

    python train.py --config configs/wmt14_ende_transformer_base.py --workdir runs/ende_base
    python eval.py --workdir runs/ende_base --checkpoint average:5

Paper: 27.3 BLEU on newstest2014 (tokenized, compound-split; about 1.5 lower in sacreBLEU),
25.8 BLEU / 4.92 perplexity on newstest2013 without averaging; 100k steps of ~25k source +
~25k target tokens, ~12 hours on 8 P100s. About 63M parameters with a 37k shared vocabulary
(the paper says 65M, perhaps from a larger vocabulary; docs/benchmarks.md, "Parameter counts").
"""

from seq2seq.config import default_config


def get_config():
    config = default_config()
    config.model.name = "transformer"  # base sizes are the schema's defaults (N=6, d_model 512,
    # d_ff 2048, h 8, d_k = d_v 64, P_drop 0.1, post-LN, sinusoidal positions, 3-way tying)

    data = config.data
    data.source = "tfds"
    data.name = "wmt14_translate/de-en"  # newstest2013 = validation, newstest2014 = test
    data.src_lang = "en"  # the paper's direction, English→German
    data.tgt_lang = "de"
    data.tokenizer = "bpe"  # "byte-pair encoding ... shared source-target vocabulary"
    data.vocab_size = 37000  # "about 37000 tokens"
    data.shared_vocab = True
    data.max_length = 256  # tokens; longer training pairs are dropped
    data.tokens_per_batch = 25000  # "approximately 25000 source tokens and 25000 target tokens"
    data.bucket_width = 32

    train = config.train
    train.steps = 100_000  # base: 100k steps
    train.schedule = "transformer"  # Eq. 3
    train.learning_rate = 1.0  # multiplier of d_model^-0.5 * min(...): exactly Eq. 3
    train.warmup_steps = 4000
    train.adam_b1, train.adam_b2, train.adam_eps = 0.9, 0.98, 1e-9
    train.label_smoothing = 0.1
    train.log_every_steps = 100
    train.dtype = "auto"  # bfloat16 on a GPU or TPU (float32 parameters and loss); CPU: float32

    # "averaging the last 5 checkpoints, which were written at 10-minute intervals": minutes of
    # training (validation and compiles off the clock), whatever the accelerator's speed.
    config.checkpoint.every_steps = 0
    config.checkpoint.every_minutes = 10.0
    config.checkpoint.keep = 5
    return config
