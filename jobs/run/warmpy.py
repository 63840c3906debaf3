"""`PYTHON .../jobs/run/warmpy.py`: a warm interpreter (issue 65 #2) — the Python of a command job's environment,
started ahead of time in a sandbox of its own (jobs.run.warm), with that environment's heavy imports made, for one
`python script.py …` or `python -m module …` job it does not know yet.

It runs by its file, with the environment's own interpreter (a project's venv has no gpudeck in it), and imports
only the standard library itself. Its life:

1. It takes its own folder off `sys.path` (a job's `launch.py` must not find ours), then imports the modules
   IMPORTS_ENV names (those this environment's last warm job imported: recorded at its exit, see `record`), each
   on its own, a failure skipped. No device is touched: `CUDA_VISIBLE_DEVICES` is empty while it warms, and were
   CUDA started by an import (torch.cuda, TensorFlow's devices listed), it would hold no GPU of its job's: it exits
   1 (its worker starts the job cold).
2. It waits for one JSON line on WARM_FD_ENV's descriptor: the job's `env`, `cwd`, `argv` (as Python would have
   it: `script.py ARGS…`, or `-m MODULE ARGS…`) and `orig_argv`. The sandbox's first process (jobs.run.shim) sends
   it on only once the job dir is mounted at the job's own path, so JOB_DIR, the cwd and every path are a cold
   run's. End of file: no job is coming (its worker let it go); it exits 0.
3. It becomes the job as `python` would have started it: the environment replaced (`os.environ`, which child
   processes and C's getenv see), the cwd, `sys.argv`, `sys.path[0]` (the script's folder, or the cwd for `-m`), a
   fresh `__main__` module; then it runs the script (compiled from its bytes, as Python reads a script) or the
   module (runpy, as `-m` does). Its exit status, an uncaught exception's traceback (this file's frames left out),
   an uncaught KeyboardInterrupt's death by SIGINT, atexit handlers and signals are Python's own.

Left out: flags other than `-u` (PYTHONUNBUFFERED is set for every job already), `-c`, a folder or zip run as a
script, a job whose environment sets a variable Python reads at its start (PYTHON*, the locale): those start cold
(jobs.run.warm.python_invocation, Warm.unusable_command).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import types

FD_ENV = "GPUDECK_WARM_FD"
"""The inherited descriptor the job's line comes on."""
IMPORTS_ENV = "GPUDECK_WARM_IMPORTS"
"""Comma-separated top-level modules to import while warming."""
RECORD_ENV = "GPUDECK_WARM_RECORD"
"""Where (a path, in the job's own line) the modules the job imported are written at its exit."""
MAX_IMPORTS = 64
EXIT_TOUCHED = 1
HERE = os.path.abspath(__file__)


def warm(names: list[str]) -> float:
    """Import `names`, each on its own (what fails is skipped); the seconds it took."""
    began = time.monotonic()
    for name in names[:MAX_IMPORTS]:
        if not name.isidentifier():
            continue
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001, S110 (an import that fails or exits is the job's to meet, cold)
            pass
    return time.monotonic() - began


def device_touched() -> str | None:
    """Which library started CUDA while warming (its devices then are not the job's), or None."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return "torch"
    except Exception:  # noqa: BLE001, S110 (a torch without cuda)
        pass
    if "tensorflow" in sys.modules:
        try:
            from tensorflow.python.eager import context

            if context.context()._physical_devices is not None:  # noqa: SLF001 (TensorFlow keeps no public flag)
                return "tensorflow"
        except Exception:  # noqa: BLE001, S110
            pass
    return None


def read_line(fd: int) -> dict | None:
    raw = b""
    while not raw.endswith(b"\n"):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        raw += chunk
    return json.loads(raw)


def record(path: str, before: set[str], own: list[str]) -> None:
    """At the job's exit: the top-level modules it imported that this interpreter had not, in import order, to
    `path` — what the next warm interpreter of this environment imports ahead. Only libraries: not the standard
    library's (the libraries import what they need of it), not its own code (under `own`)."""
    names = []
    stdlib: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        if top in before or top in names or top in stdlib or top.startswith("_") or name != top:
            continue
        where = getattr(module, "__file__", None) or ""
        if where and any(os.path.abspath(where).startswith(o + os.sep) for o in own):
            continue
        names.append(top)
    try:
        with open(path, "w") as f:
            f.write("\n".join(names[:MAX_IMPORTS]) + "\n")
    except OSError:
        pass


def outside_here(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A traceback without this file's frames at its head (a cold run's has none of them)."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == HERE:
        tb = tb.tb_next
    return tb


def run(job: dict, before: set[str]) -> None:
    """Become the job and run it (returns, or raises SystemExit, as a script's end would). `before`: the modules
    this interpreter had before it warmed (what is not among them is recorded at the job's exit)."""
    os.environ.clear()
    os.environ.update(job["env"])
    os.chdir(job["cwd"])
    argv = list(job["argv"])
    if hasattr(sys, "orig_argv"):  # (Python 3.10 on: an environment's Python may be older)
        sys.orig_argv[:] = job["orig_argv"]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    if argv[0] == "-m":
        sys.path[0:0] = [os.getcwd()]
        own = [os.getcwd()]
    else:
        script = os.path.abspath(argv[0])
        sys.path[0:0] = [os.path.dirname(script)]
        own = [os.path.dirname(script), os.getcwd()]
    if job.get("record"):
        import atexit

        atexit.register(record, job["record"], before, own)  # (first registered: it runs last)
    sys.argv[:] = ["-m", *argv[2:]] if argv[0] == "-m" else argv  # (-m's module is no argument; runpy puts its file)
    try:
        if argv[0] == "-m":
            import runpy

            getattr(runpy, "_run_module_as_main")(argv[1], alter_argv=True)  # noqa: B009 (what `python -m` calls)
        else:
            try:
                with open(script, "rb") as f:
                    source = f.read()
            except OSError as exc:
                sys.stderr.write(f"{sys.executable}: can't open file {script!r}: [Errno {exc.errno}] {exc.strerror}\n")
                raise SystemExit(2) from None
            code = compile(source, script, "exec")
            from importlib.machinery import SourceFileLoader

            main.__dict__.update(__file__=script, __cached__=None, __builtins__=__builtins__)
            main.__dict__["__loader__"] = SourceFileLoader("__main__", script)
            del source
            exec(code, main.__dict__)  # noqa: S102 (the job's own script, in its sandbox, as `python script.py` runs it)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 (printed as Python prints an uncaught one)
        tb = outside_here(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # (the hook prints the exception's own traceback)
        if isinstance(exc, KeyboardInterrupt):  # (Python dies by SIGINT then; atexit handlers first)
            import atexit

            atexit._run_exitfuncs()  # noqa: SLF001
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(1) from None


def main() -> int:
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(HERE):
        del sys.path[0]  # (a script's folder comes first on sys.path: ours must not shadow the job's modules)
    fd = int(os.environ.pop(FD_ENV))
    before = {n.partition(".")[0] for n in sys.modules}
    warm([n for n in os.environ.pop(IMPORTS_ENV, "").split(",") if n])
    touched = device_touched()
    if touched is not None:
        print(f"gpudeck: the warm interpreter's {touched} touched a device before its job: not used", file=sys.stderr)
        return EXIT_TOUCHED
    job = read_line(fd)
    os.close(fd)
    if job is None:
        return 0
    run(job, before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
