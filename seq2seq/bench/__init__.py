"""Speed as measured facts: ``python -m seq2seq.bench matmul|train|decode|data|all``.

The measurements live in ``seq2seq.bench.measure`` (importable, no flags); the command line is
``seq2seq/bench/__main__.py``. The figures: docs/benchmarks.md.
"""

# Constants the command line shows before it loads JAX (its flags' defaults, its summary's bar);
# ``seq2seq.bench.measure`` measures with them.
MATMUL_SIZES = (512, 1024, 2048)  # square n x n @ n x n; the largest usually runs fastest
# The input pipeline's target on the 2-core development CPU: its tokens/s over what training
# consumes.
TARGET_DATA_MULTIPLE = 10.0
