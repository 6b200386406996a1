"""Checkpoints: saving and restoring them, and which one of a run to read.

* ``store``: orbax checkpoints of the train state and the data position; training saves and
  restores whole states, evaluation reads the parameters alone (without importing training);
* ``rule``: the rule ``latest`` | ``best`` | ``STEP`` | ``average:K`` that picks a checkpoint
  (or the mean of the last K) and resolves it against a run's saved steps; it reads no files.
"""
