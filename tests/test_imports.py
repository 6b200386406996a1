"""Importing any module of the package does nothing: no flags defined, no work started."""

import importlib
import pkgutil

import orbax.checkpoint  # noqa: F401  (defines its own experimental flags on first import)
from absl import app, flags  # noqa: F401  (absl.app defines --pdb, --profile_file, ... likewise)

import seq2seq


def test_every_module_imports_in_one_process_without_defining_flags():
    names = [m.name for m in pkgutil.walk_packages(seq2seq.__path__, "seq2seq.")]
    assert "seq2seq.summary" in names and "seq2seq.average" in names
    before = set(flags.FLAGS)
    for name in names:
        importlib.import_module(name)
    ours = {
        name
        for name in set(flags.FLAGS) - before
        if flags.FLAGS.find_module_defining_flag(name, "").startswith("seq2seq")
    }
    assert not ours, f"importing the package defined flags {sorted(ours)}"
