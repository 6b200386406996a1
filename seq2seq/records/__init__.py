"""A run's records in its work directory: where each file lives, and what produced the run.

* ``run_directory``: ``RunDirectory``, the one place that knows the layout of a work directory
  (config, tokenizer, checkpoints, metrics, scores);
* ``provenance``: the code, packages and devices behind every start and resume
  (``provenance.json``).
"""
