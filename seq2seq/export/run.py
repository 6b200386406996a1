"""Exporting a trained run (what ``python -m seq2seq.export`` and ``--engine ctranslate2`` do)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from flax import nnx

from seq2seq import cli
from seq2seq.export.converter import QUANTIZATIONS, check_exportable, export
from seq2seq.models import model_section
from seq2seq.records.run_directory import RunDirectory
from seq2seq.records.whole import written_whole


def export_run(
    workdir: Path | RunDirectory,
    output: Path,
    quantization: str = "float32",
    checkpoint: str = "latest",
) -> dict:
    """Exports ``workdir``'s parameters (by the ``checkpoint`` rule) to ``output``.

    Everything that can be refused (the model, the quantization, the output) is checked before
    the parameters are read.
    """
    from seq2seq.evaluation.restore import restore_model

    run = RunDirectory.at(workdir)
    config = run.load_config()
    check_exportable(config.model.name, model_section(config))
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"unknown --quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}"
        )
    cli.check_work_directory(output, "--output", "name a new directory")
    if output.exists() and any(output.iterdir()):
        raise ValueError(f"--output {output} already holds files; name a new directory")
    tokenizer, graphdef, params, choice = restore_model(run, config, checkpoint)
    model = nnx.merge(graphdef, params)
    with written_whole(output) as folder:  # an interrupted export leaves no half model
        export(model, run.tokenizer_dir, tokenizer, config, folder, quantization)
    return {
        "workdir": str(run.path),
        "output": str(output),
        "quantization": quantization,
        "checkpoint": choice.describe(),
    }


def exported_translator(
    workdir: Path | RunDirectory,
    quantization: str = "float32",
    checkpoint: str = "latest",
    **options,
):
    """``workdir`` exported to a temporary directory and loaded by CTranslate2 (which reads the
    whole model when it loads it, so the directory is removed at once): ``eval.py --engine
    ctranslate2`` without ``--exported``. ``options`` go to ``ExportedTranslator``."""
    from seq2seq.export.engine import ExportedTranslator

    with tempfile.TemporaryDirectory(prefix="seq2seq-ctranslate2-") as directory:
        output = Path(directory) / "model"
        exported = export_run(workdir, output, quantization, checkpoint)
        translator = ExportedTranslator(output, **options)
    translator.source = (
        f"{exported['workdir']} ({exported['checkpoint']}) exported at {quantization}"
    )
    return translator
