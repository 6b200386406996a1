"""A small Transformer for German->English Multi30k (29k caption pairs) in an hour on 2 CPUs.

    python train.py --config configs/multi30k_transformer.py --workdir runs/m30k_transformer
    python eval.py --workdir runs/m30k_transformer

The paper's base model at half its width and depth (d_model 256, 3+3 layers), pre-LN, with a
shared subword vocabulary and three-way weight tying as in Vaswani et al.; batches pack several
captions per row, which keeps padding under a tenth of the batch. Adam with linear warm-up to a
peak, then inverse square root (Eq. 3's shape with the peak stated directly, so that one grid
serves both Multi30k configs); peak, warm-up and batch size were chosen on the validation split
by the comparison's sweeps, the same trials for both models, and so were dropout and label
smoothing (docs/results.md#regularisation-tuned-for-both-models): the paper's dropout 0.1, but no
label smoothing, which cost validation BLEU within an 8-minute budget. The data is read from
``../shared/data/multi30k`` next to the repository (whatever the working directory);
``--config.data.dir=/elsewhere`` points at another copy.

The sweeps, every measured run of this config and the commands behind them: docs/results.md.
"""

from seq2seq.config import default_config, use_multi30k


def get_config():
    config = default_config()
    config.model.name = "transformer"
    t = config.model.transformer
    t.d_model = 256  # half the base model's width
    t.d_ff = 1024  # 4 * d_model, as in the paper
    t.num_heads = 4
    t.d_k = 64  # d_model / h, as in the paper
    t.d_v = 64
    t.encoder_layers = 3  # half the base model's depth
    t.decoder_layers = 3
    t.dropout_rate = 0.1  # the paper's P_drop (tuned: 0.1, 0.2, 0.3)
    t.norm = "pre"  # pre-LN tolerates the short warm-up and high peak that a CPU budget needs

    data = config.data
    use_multi30k(data)  # German -> English, shared unigram vocabulary of 8000, up to 64 tokens
    data.tokens_per_batch = 2048  # tokens per side and batch, ~120 captions (the paper: ~25k)
    data.bucket_width = 8  # only used by the evaluation batches when packing
    data.pack = True  # ~3.7 captions per 64-token row instead of one padded sentence

    train = config.train
    train.steps = 100_000  # more than fit the hour: the time budget ends the run
    train.time_budget_minutes = 55.0  # leaves a few minutes for eval.py
    train.log_every_steps = 50
    train.schedule = "warmup_rsqrt"  # Eq. 3's shape, with the peak stated directly
    train.learning_rate = 4e-3  # peak, at the end of warm-up (tuned: docs/results.md)
    train.warmup_steps = 400  # ~1.5 epochs (the paper: 4000 of 100k steps; tuned: docs/results.md)
    train.label_smoothing = 0.0  # the paper: 0.1 (tuned: 0, 0.1)
    # Intervals in training minutes, so that models of different step speeds are validated and
    # checkpointed at the same times: `best` picks among as many points, and `average:5` averages
    # the same last 5 minutes of every model.
    config.checkpoint.every_steps = 0
    config.checkpoint.every_minutes = 1.0
    config.checkpoint.keep = 6  # eval.py/compare --checkpoint average:5 can score their mean
    config.eval.every_minutes = 2.5  # validation BLEU (and at the end)
    config.eval.num_examples = 500  # of the 1,014 val captions: ~30 s of greedy decoding
    config.eval.batch_size = 256  # sentences per search; 64 decodes 7-12% slower (benchmarks.md)
    return config
