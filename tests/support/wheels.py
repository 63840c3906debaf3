"""Python packages made inside a test (nothing is downloaded): a pure-Python wheel of one module."""

from __future__ import annotations

import zipfile
from pathlib import Path


def wheel(folder: Path, name: str, version: str, code: str = "VALUE = 1\n") -> Path:
    """A pure-Python wheel of one module, as a build backend would make it (enough for an installer)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": code,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpudeck-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
    return path
