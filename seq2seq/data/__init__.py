"""Data: sentence pairs to training batches, in the order the pipeline runs.

``sources`` (synthetic task, text files, TFDS) -> ``tokenizer`` (SentencePiece on a seeded
sample) -> ``encoded`` (flat token arrays, filters) -> ``batching`` (length buckets) or
``packing`` (several pairs per row) -> ``pipeline`` (the one place that reads ``config.data``).
"""
