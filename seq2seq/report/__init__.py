"""Reports: figures (curves, BLEU by length, alignment heatmaps) and tables; nothing that trains."""
