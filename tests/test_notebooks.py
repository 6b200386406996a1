"""Notebooks import from seq2seq, define no logic of their own, and run top to bottom.

The run uses the notebooks' short mode (``SEQ2SEQ_NOTEBOOK_SHORT=1``): tiny models trained for a
few steps into a temporary directory. Every claim a notebook makes is an ``assert`` in its cells,
so a wrong claim fails here.
"""

import ast
import json
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import REPO

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


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_short_mode(path, tmp_path, monkeypatch):
    monkeypatch.setenv("SEQ2SEQ_NOTEBOOK_SHORT", "1")
    monkeypatch.setenv("SEQ2SEQ_NOTEBOOK_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(REPO / ".jax_cache"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.prefix)"))
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    kernel_prefix = notebook.cells[-1].outputs[0]["text"].strip()
    assert kernel_prefix == sys.prefix, "the notebook ran in another Python than this one's"
