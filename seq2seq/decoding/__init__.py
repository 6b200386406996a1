"""Decoding: beam search over the model contract's cached ``decode``.

``beam_search.beam_search`` decodes a batch of sentences in one ``jax.lax.while_loop``; with a
beam of one it is greedy search (validation during training decodes that way). ``search_parts``
holds the next-token scores, output length limits and beam plumbing.
"""
