"""Importing any module of the package does nothing: no flags defined (but ``seq2seq.cli``'s
shared ones), no work started; and no two modules import each other."""

import ast
import importlib
import importlib.util
import pkgutil

import orbax.checkpoint  # noqa: F401  (defines its own experimental flags on first import)
from absl import app, flags  # noqa: F401  (absl.app defines --pdb, --profile_file, ... likewise)

import seq2seq


def test_every_module_imports_in_one_process_without_defining_flags():
    names = [m.name for m in pkgutil.walk_packages(seq2seq.__path__, "seq2seq.")]
    assert "seq2seq.bench.summary" in names and "seq2seq.evaluation.average" in names
    importlib.import_module("seq2seq.cli")  # the one that defines the commands' shared flags
    before = set(flags.FLAGS)
    for name in names:
        importlib.import_module(name)
    ours = {
        name
        for name in set(flags.FLAGS) - before
        if flags.FLAGS.find_module_defining_flag(name, "").startswith("seq2seq")
    }
    assert not ours, f"importing the package defined flags {sorted(ours)}"


def _package_imports() -> dict[str, set[str]]:
    """Module name -> the package's modules it imports, at the top or inside a function."""
    names = {m.name for m in pkgutil.walk_packages(seq2seq.__path__, "seq2seq.")}
    graph = {}
    for name in names:
        tree = ast.parse(importlib.util.find_spec(name).loader.get_source(name))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # ``from seq2seq.x import y``: module seq2seq.x.y when y is one, else seq2seq.x
                imported |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module
                    for a in node.names
                }
        graph[name] = (imported & names) - {name}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for child in graph[todo.pop()] - seen:
            seen.add(child)
            todo.append(child)
    return seen


def test_no_module_imports_itself_back_through_others():
    graph = _package_imports()
    # The CPU path of Eq. 1 is below the layers: attention imports it, never the reverse.
    assert "seq2seq.attention.cpu" in graph["seq2seq.attention.layers"]
    assert "seq2seq.attention.layers" not in _reachable(graph, "seq2seq.attention.cpu")
    cycles = sorted(name for name in graph if name in _reachable(graph, name))
    assert not cycles, f"modules that import themselves back through others: {cycles}"


# The package's folders and top-level modules, lowest first: each imports only from those before
# it (at the top of a module or inside a function), so the folder list reads as the pipeline.
# config reads the model registry, so it sits above models; cli needs only config and runtime.
LAYERS = [
    "vocabulary",
    "logical_axes",
    "linear",
    "dropout",
    "attention",
    "models",
    "config",
    "runtime",
    "progress",
    "cli",
    "checkpoints",
    "records",
    "data",
    "training",
    "decoding",
    "evaluation",
    "report",
    "export",
    "serve",
    "compare",
    "bench",
]


def _imports_outside_type_checking(tree: ast.AST) -> set[str]:
    """The seq2seq modules a module imports, leaving out ``if TYPE_CHECKING:`` blocks (names
    for annotations only, never imported at run time)."""
    imported = set()
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported |= {f"{node.module}.{alias.name}" for alias in node.names}
        todo.extend(ast.iter_child_nodes(node))
    return {name for name in imported if name.startswith("seq2seq.")}


def test_each_folder_imports_only_from_the_layers_below_it():
    def layer(module: str) -> str:
        return module.split(".")[1]

    names = [m.name for m in pkgutil.walk_packages(seq2seq.__path__, "seq2seq.")]
    assert {layer(name) for name in names} == set(LAYERS), "a new folder needs its place in LAYERS"
    upward = []
    for name in names:
        tree = ast.parse(importlib.util.find_spec(name).loader.get_source(name))
        for imported in _imports_outside_type_checking(tree):
            if LAYERS.index(layer(imported)) > LAYERS.index(layer(name)):
                upward.append(f"{name} imports {imported}")
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(sorted(upward))


def test_the_packages_above_each_command_load_nothing_before_its_start():
    """``python -m seq2seq.x.y`` imports ``seq2seq`` and ``seq2seq.x`` before ``y`` runs its
    ``cli.start()``, which must come before JAX loads and restarts the process: a package
    ``__init__`` that imported the world would load it twice and JAX before the preamble."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(seq2seq.__file__).parent
    commands = [
        path.relative_to(root.parent).with_suffix("")
        for path in root.rglob("*.py")
        if "cli.start()" in path.read_text() and path.name != "cli.py"
    ]
    packages = sorted({".".join(c.parts[:n]) for c in commands for n in range(1, len(c.parts))})
    assert "seq2seq.compare" in packages and "seq2seq.bench" in packages, packages
    probe = (
        "import importlib, sys\n"
        f"for name in {packages!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in ('jax', 'numpy', 'flax', 'absl') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["[]"], f"importing {packages} loaded {done.stdout.strip()}"
