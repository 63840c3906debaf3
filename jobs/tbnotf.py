"""TensorBoard without TensorFlow. TensorBoard uses its own TensorFlow stub (reading local event files, which is
all gpudeck needs of it) instead of importing the real TensorFlow when a module `tensorboard.compat.notf`
exists. Without TensorFlow a TensorBoard process is up in ~1 s instead of ~7 s and holds ~80 MB instead of
~530 MB; the scalars reader of command jobs reads event files the same way.

`python -m jobs.tbnotf ARGS` runs `tensorboard ARGS` so."""

from __future__ import annotations

import sys
import types


def use_stub() -> None:
    """Make this process's TensorBoard modules use TensorBoard's TensorFlow stub (call before importing them)."""
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))


def main() -> None:
    use_stub()
    from tensorboard.main import run_main

    sys.argv[0] = "tensorboard"
    run_main()


if __name__ == "__main__":
    main()
