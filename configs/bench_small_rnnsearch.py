"""The RNNsearch of ``python -m seq2seq.bench`` at about ``bench_small``'s parameter count.

    python -m seq2seq.bench train --config configs/bench_small_rnnsearch.py
    python -m seq2seq.bench decode --config configs/bench_small_rnnsearch.py

Bahdanau et al.'s architecture (bidirectional GRU encoder, additive attention, GRU decoder,
maxout deep output) with one embedding table shared by both languages, sized so that its
parameters are within a few per cent of ``configs/bench_small.py`` (``python -m seq2seq.bench
train`` prints both counts). The data, batch shape (32 sentences x 64 + 64 tokens), optimizer,
label smoothing and dtype are bench_small's, so the two step times compare like for like.
"""

from pathlib import Path

from seq2seq.config import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("bench_small.py"))
    config.model.name = "rnnsearch"
    r = config.model.rnnsearch
    r.embedding_size = 256
    r.encoder_hidden_size = 320  # per direction
    r.decoder_hidden_size = 320
    r.alignment_size = 320
    r.maxout_size = 256
    r.share_embeddings = True
    r.dropout_rate = 0.1
    config.decode.beam_size = 5  # the target: >= 90 sentences/s with beam 5
    config.decode.alpha = 0.0  # plain beam search, as Bahdanau et al.
    return config
