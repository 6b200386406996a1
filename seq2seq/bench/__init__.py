"""Speed as measured facts: ``python -m seq2seq.bench matmul|train|decode|data|all``.

The measurements live in ``seq2seq.bench.measure`` (importable, no flags); the command line is
``seq2seq/bench/__main__.py``. The figures: docs/benchmarks.md.
"""
