"""The fixed comparison Transformer of ``python -m seq2seq.bench`` (issue 11).

    python -m seq2seq.bench train --config configs/bench_small.py
    python -m seq2seq.bench decode --config configs/bench_small.py

Vocabulary 8000, d_model 256, 4 heads, d_ff 1024, 3 + 3 layers, pre-LN, one embedding shared by
source, target and the pre-softmax projection, dropout 0.1, label smoothing 0.1, Adam, float32.
Every batch holds exactly 32 sentences padded to 64 source and 64 target tokens (bucket width
64); ``bench train`` fills such batches with random token ids (every position real), so its step
time is the model's at that exact shape. The data pipeline (``bench data``) reads the synthetic
task, whose word vocabulary is smaller than the 8000 bound.
"""

from seq2seq.config import default_config


def get_config():
    config = default_config()
    config.model.name = "transformer"
    t = config.model.transformer
    t.d_model = 256
    t.num_heads = 4
    t.d_k = 64  # d_model / h
    t.d_v = 64
    t.d_ff = 1024
    t.encoder_layers = 3
    t.decoder_layers = 3
    t.norm = "pre"
    t.share_embeddings = True
    t.tie_output = True
    t.dropout_rate = 0.1

    config.data.source = "synthetic"
    config.data.synthetic_lengths = "uniform"  # 3..50 words: sentences of every length to 64
    config.data.synthetic_max_words = 50
    config.data.tokenizer = "word"
    config.data.vocab_size = 8000
    config.data.max_length = 64
    config.data.sentences_per_batch = 32
    config.data.bucket_width = 64  # one bucket: every batch is [32, 64] on both sides

    config.train.optimizer = "adam"
    config.train.label_smoothing = 0.1
    config.train.dtype = "float32"
    config.decode.beam_size = 4  # Vaswani et al.; the target: >= 40 sentences/s
    config.decode.alpha = 0.6
    return config
