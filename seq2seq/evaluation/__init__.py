"""Evaluation: decoding a split, and scoring it with sacreBLEU."""
