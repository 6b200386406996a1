"""What prepares a process before JAX runs anything: host memory, the compilation cache, XLA flags.

Each entry point calls ``seq2seq.cli.start`` first, which applies all three:

* ``host_memory``: restart once under glibc settings that keep XLA's host memory;
* ``compilation_cache``: compiled programs kept on disk for later processes;
* ``xla_flags``: GPU matrix products from the vendor libraries.
"""
