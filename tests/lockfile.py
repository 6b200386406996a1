"""Does ``requirements.lock`` still satisfy ``pyproject.toml``? (`make lock` refreshes it.)

The lock is written by ``uv pip compile --generate-hashes`` (see the Makefile): one
``NAME==VERSION`` pin per line, each followed by its ``--hash`` lines and ``# via`` comments.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def locked_versions(lock_path: Path) -> dict[str, str]:
    """The pinned version of each package in a lock file, by canonical name."""
    pins = {}
    for line in Path(lock_path).read_text().splitlines():
        if match := _PIN.match(line):
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def project_requirements(pyproject_path: Path) -> list[Requirement]:
    """The project's dependencies and those of every extra (the Makefile locks them all)."""
    project = tomllib.loads(Path(pyproject_path).read_text())["project"]
    lines = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        lines += extra
    return [Requirement(line) for line in lines]


def lock_problems(pyproject_path: Path, lock_path: Path) -> list[str]:
    """Each requirement of ``pyproject_path`` that ``lock_path`` misses or pins outside its range.

    Returns:
      One sentence per problem; an empty list when the lock satisfies every requirement.
    """
    pins = locked_versions(lock_path)
    problems = []
    for requirement in project_requirements(pyproject_path):
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue  # not needed on this platform
        version = pins.get(canonicalize_name(requirement.name))
        if version is None:
            problems.append(f"{requirement} is not in {lock_path}")
        elif not requirement.specifier.contains(version, prereleases=True):
            locked = f"{requirement.name}=={version}"
            problems.append(f"{requirement} does not allow the locked {locked}")
    return problems
