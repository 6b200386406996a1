"""The README stays a manual and the configs' docstrings stay short: limits that fail loudly
instead of regrowing silently; every relative link of the README and docs/ names a file, and
every ``#anchor`` a heading of that file (GitHub's rule for heading ids); and ``make`` alone
lists what it can do."""

import ast
import re
import subprocess

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


def heading_ids(page):
    """The ``#anchor`` of each heading of a Markdown page, as GitHub makes them: the heading's
    text without its links' targets, lower case, without punctuation but ``-`` and ``_``, each
    space a ``-``; a repeated id gets ``-1``, ``-2``... Lines inside code fences are not headings.
    """
    ids, seen, fenced = set(), {}, False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6} +(.*?)[ #]*$", line)
        if heading:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).lower()
            slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
            ids.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return ids


def test_heading_ids_follow_githubs_rule(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# The frontier on a GPU, end to end (2026-12-05)\n## Notes\n```\n# not a heading\n```\n"
        "## Notes\n### Export to [CTranslate2](https://x.org) `int8`\n"
    )
    assert heading_ids(page) == {
        "the-frontier-on-a-gpu-end-to-end-2026-12-05", "notes", "notes-1",
        "export-to-ctranslate2-int8",
    }  # fmt: skip


@pytest.mark.parametrize(
    "page", [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_every_anchor_names_a_heading_of_its_page(page):
    """A link to a renamed or dated-away section opens the top of the page instead: a reader
    lands far from what the sentence promised."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target) or "#" not in target:
            continue
        file, anchor = target.split("#", 1)
        linked = page.parent / file if file else page
        if linked.suffix == ".md" and linked.exists() and anchor not in heading_ids(linked):
            broken.append(target)
    assert not broken, f"{page.name} links to headings that do not exist: {broken}"


def test_make_alone_lists_every_target_and_clean_never_deletes_runs():
    makefile = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*?)\n(?!\t)", makefile, re.S | re.M).group(1)
    targets = phony.replace("\\", " ").split()
    listed = subprocess.run(
        ["make", "--no-print-directory"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0 and "pip" not in listed.stdout, listed.stderr
    unlisted = [t for t in targets if t != "help" and not re.search(rf"\b{t}\b", listed.stdout)]
    assert not unlisted, f"make alone does not list {unlisted}"
    cleaning = subprocess.run(
        ["make", "--no-print-directory", "--dry-run", "clean"], cwd=REPO, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    (removal,) = [line for line in cleaning.stdout.splitlines() if line.startswith("rm ")]
    assert ".jax_cache" in removal.split() and "runs" not in removal.split()


RECORD_PAGES = ("results.md", "benchmarks.md")  # dated records: commands kept as they were run
SHELLS = ("bash", "sh", "shell", "console")


def bare_python_commands(page):
    """Lines of a page's shell blocks that start Python by the bare name ``python`` (or
    ``python3``), after any ``VAR=value``, ``srun`` or ``cd DIR &&`` in front of it; comments
    are not commands."""
    found, fence = [], None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
        elif fence in SHELLS and re.search(
            r"(^|[\s;&|(])python3?\s", re.sub(r"(^|\s)#.*", "", line)
        ):
            found.append(f"{page.name}:{number}")
    return found


def test_bare_python_commands_are_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "python x\n```bash\n.venv/bin/python -m a\nX=1 python b\n  cd s && python3 c\n"
        "srun python d\n# python is the language\n```\n```\nlayout/   python -m x\n```\n"
    )
    assert bare_python_commands(page) == ["page.md:4", "page.md:5", "page.md:6"]


@pytest.mark.parametrize(
    "page",
    [
        REPO / "README.md",
        *sorted(p for p in (REPO / "docs").glob("*.md") if p.name not in RECORD_PAGES),
    ],
    ids=lambda p: p.name,
)
def test_every_command_runs_the_projects_python(page):
    """``python`` in a fresh shell is the system's, without jax: a command copied from the manual
    fails with ``No module named 'jax'``. The manual's commands name ``.venv/bin/python``."""
    bare = bare_python_commands(page)
    assert not bare, f"commands run a bare `python` (write .venv/bin/python): {bare}"


@pytest.mark.parametrize("name", RECORD_PAGES)
def test_the_dated_records_say_which_python_their_commands_ran(name):
    opening = "\n".join((REPO / "docs" / name).read_text().splitlines()[:12])
    assert ".venv/bin/python" in opening, f"docs/{name} does not say what `python` is"


def test_every_file_test_fast_leaves_out_exists():
    """A renamed test file that trains runs would otherwise slip back into ``make test-fast``."""
    makefile = (REPO / "Makefile").read_text()
    skips = re.search(r"^FAST_SKIPS := (.*?)\n(?!\t)", makefile, re.S | re.M).group(1)
    names = skips.replace("\\", " ").split()
    assert len(names) > 30, names
    missing = [n for n in names if not (REPO / "tests" / f"test_{n}.py").exists()]
    assert not missing, f"FAST_SKIPS names test files that do not exist: {missing}"
