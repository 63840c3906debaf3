"""Run the README's examples as written: a fenced block between `<!-- NAME: ... -->` and `<!-- /NAME -->`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough_commands(name: str = "walkthrough") -> list[str]:
    text = README.read_text()
    block = re.search(rf"<!-- {name}:.*?-->\s*```sh\n(.*?)```\s*<!-- /{name} -->", text, re.S)
    assert block, f"README.md lost its {name} block"
    return [c.strip() for c in block.group(1).replace("\\\n", " ").splitlines() if c.strip()]


def run_block(
    name: str, port: int, cwd: Path, env: dict[str, str] | None = None, errors: list[str] | None = None
) -> list[str]:
    """Run a README block's commands in order (bash, `localhost:8686` moved to `port`); their outputs (and, into
    `errors` when given, what each wrote on stderr)."""
    outputs = []
    for command in walkthrough_commands(name):
        command = command.replace("localhost:8686", f"localhost:{port}")
        run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=240, cwd=cwd, env=env)
        assert run.returncode == 0, (command, run.stderr)
        outputs.append(run.stdout)
        if errors is not None:
            errors.append(run.stderr)
    return outputs
