"""Decoding: greedy search (and beam search) over the model contract's cached ``decode``."""
