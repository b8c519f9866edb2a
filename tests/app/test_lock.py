"""constraints-dev.txt (scripts/lock.py) pins every package pyproject.toml asks for, at a
version pyproject.toml allows: a dependency added without locking it again fails here."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (ROOT / "constraints-dev.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version.strip()
    return out


def test_every_dependency_is_pinned_within_what_pyproject_allows() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in ("dev", "local", "programs"):
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    locked = pins()
    unpinned = [r.name for r in wanted if canonicalize_name(r.name) not in locked]
    assert unpinned == [], "run scripts/lock.py after changing pyproject.toml's dependencies"
    outside = [
        f"{r.name}=={locked[canonicalize_name(r.name)]} ({r.specifier})"
        for r in wanted
        if canonicalize_name(r.name) in locked
        and not r.specifier.contains(locked[canonicalize_name(r.name)], prereleases=True)
    ]
    assert outside == []
