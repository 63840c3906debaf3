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
    name: str,
    port: int,
    cwd: Path,
    env: dict[str, str] | None = None,
    errors: list[str] | None = None,
    stop_before: str | None = None,
    start_at: str | None = None,
) -> list[str]:
    """Run a README block's commands in order (bash, `localhost:8686` moved to `port`); their outputs (and, into
    `errors` when given, what each wrote on stderr). `stop_before` / `start_at`: the block up to the first command
    that starts with it, or from there on (a test looks at what the first part did before the rest runs)."""
    outputs = []
    commands = walkthrough_commands(name)
    cut = next((i for i, c in enumerate(commands) if c.startswith(stop_before or start_at or "\0")), len(commands))
    assert (stop_before or start_at) is None or cut < len(commands), f"no command of {name} starts so"
    commands = commands[:cut] if stop_before else commands[cut:] if start_at else commands
    for command in commands:
        command = command.replace("localhost:8686", f"localhost:{port}")
        run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=240, cwd=cwd, env=env)
        assert run.returncode == 0, (command, run.stderr)
        outputs.append(run.stdout)
        if errors is not None:
            errors.append(run.stderr)
    return outputs


def json_block(name: str) -> object:
    """A README block of JSON (`<!-- NAME: … -->` then a ```json fence), parsed."""
    import json

    block = re.search(rf"<!-- {name}:.*?-->\s*```json\n(.*?)```\s*<!-- /{name} -->", README.read_text(), re.S)
    assert block, f"README.md lost its {name} block"
    return json.loads(block.group(1))
