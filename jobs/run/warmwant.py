"""What a Python command job wants of a warm interpreter (issue 65 #2), as its worker and work-horse read it: whether
its command is a Python run a warm interpreter can take (`python_invocation`), the environment an interpreter must be
made of for it (`want_of`: a PythonWant, or why none can serve it), and what a GPUs' warm key says to keep ready
(`note_python` at a job's end, `wanted` in its worker, with the modules its interpreter recorded:
`recorded_imports`). jobs.run.warm makes, hands and watches the interpreters themselves."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from redis import Redis

from jobs import jobfiles
from jobs.record import Kept
from jobs.run import warmpy
from jobs.run.launch import Launch
from jobs.settings import Settings

WARMPY_FILE = str(Path(__file__).resolve().with_name("warmpy.py"))
"""The warm interpreter's script, run by its file with the environment's own Python."""
RECORD_NAME = ".gpudeck-warm-imports"
"""Where in its job dir a warm job's interpreter writes the modules it imported (read, then removed, at its end)."""
PYTHON_WORD = re.compile(r"(?:.*/)?python(?:3(?:\.\d+)?)?")
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
SHELL_CHARS = set("|&;<>()$`\\*?[]{}~#!\n\t=")
"""In a command string, what a shell would read otherwise than as plain words: such a command starts cold."""


@dataclass(frozen=True)
class Invocation:
    """`python [-u] script.py ARGS…` or `python [-u] -m module ARGS…`: the word that names Python, its flags, and
    what `sys.argv` is (`-m` first for a module: runpy puts the module's file there, as Python does)."""

    word: str
    flags: tuple[str, ...]
    argv: list[str]


def python_invocation(command: str | list[str] | None) -> Invocation | str:
    """The Python run `command` is, or why it is none a warm interpreter can take (the job then starts cold)."""
    if command is None:
        return "not a command"
    if isinstance(command, str):
        if SHELL_CHARS & set(command):
            return "a shell command line (pipes, variables, globs or several commands)"
        try:
            words = shlex.split(command)
        except ValueError:
            return "a shell command line it cannot read as words"
    else:
        words = list(command)
    if not words or not PYTHON_WORD.fullmatch(words[0]):
        return f"it runs {words[0] if words else 'nothing'}, not python"
    flags: list[str] = []
    rest = words[1:]
    while rest and rest[0] == "-u":
        flags.append(rest.pop(0))
    if not rest:
        return "python with no script (an interactive interpreter)"
    if rest[0] == "-m":
        if len(rest) < 2 or not MODULE.fullmatch(rest[1]):
            return "python -m with no module name"
        return Invocation(words[0], tuple(flags), ["-m", *rest[1:]])
    if rest[0].startswith("-"):
        return f"python {rest[0]} (only a script, -m and -u start warm)"
    return Invocation(words[0], tuple(flags), rest)


@dataclass(frozen=True)
class PythonWant:
    """The environment a warm interpreter is made for: the Python a job's PATH finds, that PATH, its virtualenv,
    what its sandbox shows beside the usual (a project's built environment, the datasets), the variables Python
    reads as it starts, and the modules to import ahead."""

    python: str
    path: str
    venv: str | None
    readable: tuple[str, ...]
    start_vars: dict[str, str]
    imports: tuple[str, ...] = ()
    owner: str | None = None
    """Whose jobs it serves, where they set variables of their own (`env`): nobody else's."""
    env: dict[str, str] = field(default_factory=dict)
    """The job's own variables (its `env`, never its `secret_env`), set as it warms: a library imported ahead
    reads them as the job's own import would."""

    def same_place(self, other: PythonWant) -> bool:
        return replace(self, imports=()) == replace(other, imports=())


def read_at_start(name: str) -> bool:
    """A variable Python reads as it starts (a warm interpreter started without the job's cannot take it later)."""
    return name.startswith(("PYTHON", "LC_")) or name in ("LANG", "LANGUAGE")


def plain_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def want_of(
    how: Launch, spec: Kept, inv: Invocation, built: Path | None, settings: Settings, owner: str | None = None
) -> PythonWant | str:
    """The warm interpreter a command job as `how` would start cold needs, or why none can serve it. A warm
    interpreter is made before its job is known: its Python is the service's, a registered environment's or the
    project's built one (never one of a job's own folders). A library may read a variable as it is imported
    (HF_HOME, OMP_NUM_THREADS, a token): one made for jobs that set variables of their own (`env`) has them as it
    warms, and serves only their owner's next job with the very same ones; one for jobs that set none serves
    anybody's such job. A job with a `secret_env` starts cold (no secret is kept warm, nor written where the
    interpreter's environment is noted)."""
    if spec.secret_env:
        return "it has a secret_env (no secret is kept in a warm interpreter)"
    if spec.caches:
        return "it names shared caches, bound into a sandbox as it starts"
    loader = sorted(k for k in spec.env if k.startswith("LD_"))
    if loader:
        return f"its env sets {', '.join(loader)}, which the loader reads as the interpreter starts, in another folder"
    if any(not os.path.isabs(p) for p in spec.env.get("PYTHONPATH", "/").split(os.pathsep) if p):
        return "its PYTHONPATH names a folder relative to where it starts (a warm interpreter starts in another)"
    path = how.env.get("PATH", "")
    found = inv.word if "/" in inv.word else shutil.which(inv.word, path=path)
    if found is None or not os.path.isabs(found):
        return f"{inv.word} is not on its PATH as an absolute path"
    roots = [Path(sys.prefix), Path(sys.base_prefix), *(env for _, env in settings.envs)]
    if built is not None:
        roots.append(built)
    if how.source is not None and Path(found).is_relative_to(how.source.parent):
        return f"its {inv.word} is linked in its job dir"
    if not any(Path(found).is_relative_to(r) for r in roots):
        return f"its {found} is not the service's Python, a registered environment's or its project's"
    datasets_dir = settings.datasets_dir
    readable = [p for p in (built, datasets_dir) if p is not None and p.is_dir()]
    return PythonWant(
        python=found,
        path=path,
        venv=how.env.get("VIRTUAL_ENV"),
        readable=tuple(str(r) for r in readable),
        start_vars={k: v for k, v in how.env.items() if read_at_start(k)},
        owner=owner if spec.env else None,
        env=dict(spec.env),
    )


def recorded_imports(job_dir: Path) -> tuple[str, ...]:
    """The modules a warm job's interpreter wrote at its exit (RECORD_NAME, then removed): top-level names only,
    at most MAX_IMPORTS; a file the job forged names modules its environment has, nothing more."""
    try:
        text = jobfiles.read_text(job_dir, RECORD_NAME, limit=16384)
        jobfiles.unlink(job_dir, RECORD_NAME)
    except (OSError, ValueError):
        return ()
    names = [n for n in text.split() if n.isidentifier() and not n.startswith("_")]
    return tuple(dict.fromkeys(names))[: warmpy.MAX_IMPORTS]


def note_python(redis: Redis, key: str, want: PythonWant, max_age_s: float) -> None:
    """Say (at a warm-able command job's end, in its work-horse) that these GPUs' first worker keeps a warm
    interpreter of `want` ready (the same key a zoo job's hand-off sets: the last job's kind wins)."""
    said = {"kind": "python", "at": time.time(), **asdict(want)}
    redis.set(key, json.dumps(said), ex=max(1, int(max_age_s)))


def wanted(raw: bytes | None, now: float, max_age_s: float) -> PythonWant | str | None:
    """What a GPUs' warm key says to keep ready: "zoo" (a trainer), a PythonWant (an interpreter), None (nothing:
    no key, too old, unreadable)."""
    if raw is None:
        return None
    try:
        said = json.loads(raw)
    except ValueError:
        return None
    if isinstance(said, (int, float)):
        return "zoo" if now - float(said) < max_age_s else None
    if not isinstance(said, dict) or now - float(said.pop("at", 0)) >= max_age_s or said.pop("kind", "") != "python":
        return None
    try:
        return PythonWant(**{**said, "readable": tuple(said["readable"]), "imports": tuple(said["imports"])})
    except (TypeError, KeyError):
        return None
