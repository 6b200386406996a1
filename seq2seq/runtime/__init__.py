"""What prepares a process before JAX runs anything: host memory, the compilation cache, XLA flags
and threads.

Each entry point calls ``seq2seq.cli.start`` first, which applies all four:

* ``host_memory``: restart once under glibc settings that keep XLA's host memory;
* ``compilation_cache``: compiled programs kept on disk for later processes;
* ``xla_flags``: GPU matrix products from the vendor libraries;
* ``simulated_devices``: enough XLA threads that simulated CPU devices' collectives cannot starve.
"""
