"""Decoding: greedy and beam search over the model contract's cached ``decode``.

``greedy.greedy_search`` and ``beam_search.beam_search`` decode a batch of sentences in one
``jax.lax.while_loop``; ``common`` holds what they share.
"""
