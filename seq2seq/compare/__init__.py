"""Compare models the way the papers do: the same data, budget and decoding, one report.

    python -m seq2seq.compare --suite quickstart --workdir runs/quickstart
    python -m seq2seq.compare --configs configs/a.py configs/b.py --workdir runs/ab \\
        [--budget_minutes 25] [--seeds 3] [--config.train.warmup_steps=300 ...]
    python -m seq2seq.compare --suite table3 --base configs/quickstart_transformer.py \\
        --workdir runs/table3
    python -m seq2seq.compare --suite multi30k --workdir runs/m30k --budget_minutes 25 \\
        --config.train.schedule=warmup_rsqrt --tune train.learning_rate=1e-3,3e-3 \\
        --tune train.warmup_steps=300,1000 --tune_minutes 5

Each config trains into ``WORKDIR/<name>`` (``<name>-seed<K>``, seed K, with --seeds), or resumes,
or reuses a finished run there; every run is decoded on the same test split with the same beam
and length penalty; ``WORKDIR/report.md`` (table and figures), ``WORKDIR/report.json`` and
``WORKDIR/figures/*.png`` follow. ``comparison.compare`` is that job as a function; see
``runner`` for failures and interruptions, ``report`` for where each number comes from,
``suites`` for the named sets of runs and ``tuning`` for ``--tune`` (the same trials for every
config, chosen on the validation split).

This file imports nothing: ``python -m seq2seq.compare`` loads the package before its
``__main__``, which must set up the process (``seq2seq.cli.start``) before JAX loads.
"""
