"""Notebooks import from seq2seq, define no logic of their own, and run top to bottom.

The runs use the notebooks' short mode (``SEQ2SEQ_NOTEBOOK_SHORT=1``): tiny models trained for a
few steps by ``make quickstart``'s command, run from another folder, and by the notebook itself
for a model its runs folder lacks. Every claim a notebook makes is an ``assert`` in its cells,
so a wrong claim fails here.
"""

import ast
import json
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from seq2seq.compare.notebook_runs import (
    NotebookSettings,
    comparison_settings,
    has_checkpoint,
    notebook_config,
    run_name,
)
from tests.conftest import COMPILATION_CACHE, REPO, subprocess_env

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_cells_parse_and_define_nothing(path):
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        definitions = [
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        ]
        assert not definitions, f"{path.name} defines {definitions}: move them into seq2seq"
        assert not cell.get("outputs"), f"{path.name} is saved with outputs; clear them"


def _execute(path, runs, monkeypatch):
    """Runs the notebook at ``path`` in short mode on ``runs``, from its own folder (as Jupyter
    opens it), and returns its cells with their outputs; raises CellExecutionError, with the
    cell and traceback, on any error."""
    monkeypatch.setenv("SEQ2SEQ_NOTEBOOK_SHORT", "1")
    monkeypatch.setenv("SEQ2SEQ_NOTEBOOK_RUNS", str(runs))
    for name, value in COMPILATION_CACHE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # Jupyter's own: figures inline, as seen
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.prefix)"))
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    kernel_prefix = notebook.cells[-1].outputs[0]["text"].strip()
    assert kernel_prefix == sys.prefix, "the notebook ran in another Python than this one's"
    _assert_shown_as_a_reader_sees_it(path, notebook.cells)
    return notebook.cells


def _assert_shown_as_a_reader_sees_it(path, cells):
    """Every cell that draws shows an image (figures made without pyplot showed as the text
    "<Figure size 1100x420 with 2 Axes>"), and no cell writes to standard error, which Jupyter
    paints red (tqdm.auto's missing-ipywidgets warning opened both notebooks in it; a logger's
    ``WARNING:name:...`` slipped past a case-sensitive look for "Warning"; the progress lines now
    print warnings as their message alone, with no word "warning" to look for)."""
    for index, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        if "plt.show()" in cell.source or "display(Image" in cell.source:
            shown = [output for output in cell.outputs if "image/png" in output.get("data", {})]
            assert shown, f"{path.name} cell {index} draws but shows no image: {cell.outputs}"
        for output in cell.outputs:
            warned = output.get("name") == "stderr" and output.get("text", "").strip()
            assert not warned, f"{path.name} cell {index} writes to standard error: {warned}"


@pytest.fixture(scope="module")
def made_like_make_quickstart(tmp_path_factory):
    """``make quickstart``'s command, run from another folder with its relative ``--workdir``
    (``runs/quickstart``), at the notebooks' short-mode sizes; returns the work directory."""
    root = tmp_path_factory.mktemp("checkout")
    settings = comparison_settings(NotebookSettings(short=True, runs=root))
    command = [
        sys.executable, "-m", "seq2seq.compare", "--suite", "quickstart",
        "--workdir", "runs/quickstart", f"--max_test_sentences={settings.max_test_sentences}",
        *[f"--config.{key}={value}" for key, value in settings.overrides],
    ]  # fmt: skip
    subprocess.run(command, cwd=root, env=subprocess_env(), check=True, capture_output=True)
    return root / "runs" / "quickstart"


def test_every_notebook_is_run_below():
    """One short-mode run per notebook, each on the one quickstart comparison below, so that the
    suite trains the quickstart models once rather than once per notebook."""
    assert {path.name for path in NOTEBOOKS} == {"attention_qkv.ipynb", "compare_models.ipynb"}


@pytest.mark.slow
def test_the_comparison_notebook_reads_a_run_made_by_make_quickstart(
    made_like_make_quickstart, monkeypatch
):
    report = json.loads((made_like_make_quickstart / "report.json").read_text())
    assert [run["status"] for run in report["runs"]] == ["ok", "ok"]
    _execute(REPO / "notebooks" / "compare_models.ipynb", made_like_make_quickstart, monkeypatch)


@pytest.mark.slow
def test_the_attention_notebook_reuses_a_run_and_trains_the_missing_one(
    made_like_make_quickstart, tmp_path, monkeypatch
):
    """Its runs folder holds only the quickstart RNNsearch: the notebook restores it and trains
    the Transformer first, showing the training's progress lines as train.py does."""
    runs = tmp_path / "runs"
    shutil.copytree(made_like_make_quickstart / run_name("rnnsearch"), runs / run_name("rnnsearch"))
    cells = _execute(REPO / "notebooks" / "attention_qkv.ipynb", runs, monkeypatch)
    printed = "".join(
        output.get("text", "")
        for cell in cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    assert "training transformer" in printed and "training rnnsearch" not in printed, printed
    steps = notebook_config("transformer", short=True).train.steps
    assert f"\nstep {steps}/{steps} (100%" in printed, printed  # the trainer's line, message only
    assert f"\nvalidation at step {steps} " in printed, printed
    assert has_checkpoint(runs / run_name("transformer"))
