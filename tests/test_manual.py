"""The README stays a manual and the configs' docstrings stay short: limits that fail loudly
instead of regrowing silently; and every relative link of the README and docs/ names a file."""

import ast
import re

import pytest

from tests.conftest import REPO

README_LINES = 400  # what a user needs to run, configure and read the outputs; the rest: docs/
CONFIG_DOCSTRING_LINES = 20  # the command, what the config is for, the result it should reach


def test_the_readme_is_at_most_400_lines():
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines: move measurements to docs/"


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.py")), ids=lambda p: p.name)
def test_each_config_docstring_is_at_most_20_lines(path):
    first = ast.parse(path.read_text()).body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant), "no docstring"
    lines = first.end_lineno - first.lineno + 1  # from the opening to the closing quotes
    assert lines <= CONFIG_DOCSTRING_LINES, f"{path.name}: a docstring of {lines} lines"


@pytest.mark.parametrize(
    "page", [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_every_relative_link_names_a_file_that_exists(page):
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and t[0] != "#"]
    missing = sorted({t for t in local if not (page.parent / t).exists()})
    assert not missing, f"{page.name} links to files that do not exist: {missing}"
