"""A job field is declared once (issue 38), its default too (issue 63): one declaration in models/jobspec.py, and
the API validates it, keeps it (its default where it is not given, or given as null), documents it (its default too)
and `gpudeck submit --help` offers it (saying its default). The test adds a field with a default to a copy of the
code, in that one place, and looks at all of them."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIELD = """
    gpu_share: Annotated[str | None, Cli("--gpu-share", "a part of one GPU, as 10G"), Form()] = Field(
        "1G", pattern="^[0-9]+G$", description="how much of one GPU's memory the job needs"
    )
"""
PROBE = """
import json
from jobs import spec
from jobs.errors import ValidationError
from jobs.record import Kept
from api.openapi import document
from tui.screens.submit import FORM, SubmitScreen
base = {"model": "lenet", "dataset": "synthetic"}
try:
    spec.validate({**base, "gpu_share": "lots"}, default_gpus=0)
    bad = None
except ValidationError as exc:
    bad = exc.fields
kept = spec.validate({**base, "gpu_share": "10G"}, default_gpus=0)
unsaid = spec.validate(base, default_gpus=0)
null = spec.validate({**base, "gpu_share": None}, default_gpus=0)
schemas = document()["components"]["schemas"]
print(json.dumps({
    "bad": bad,
    "kept": kept.get("gpu_share"),
    "defaults": [unsaid.get("gpu_share"), null.get("gpu_share"), Kept(unsaid).raw.get("gpu_share")],
    "documented_default": schemas["ModelJobSpec"]["properties"]["gpu_share"].get("default"),
    "form": [FORM["gpu_share"].placeholder, FORM["gpu_share"].reads, SubmitScreen._read("gpu_share", "text", "20G")],
    "documented": {k: "gpu_share" in schemas[k]["properties"] for k in ("ModelJobSpec", "CommandJobSpec", "JobSpec")},
    "always_kept": "gpu_share" in schemas["JobSpec"]["required"],
}))
"""


def test_a_field_added_in_one_place_is_validated_kept_documented_and_offered(tmp_path):
    for package in ("api", "jobs", "models", "tui"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "the code as it is"], check=True)
    declared = tmp_path / "models" / "jobspec.py"
    text = declared.read_text()
    anchor = '    kind_name: ClassVar[str] = ""\n'
    assert text.count(anchor) == 1
    declared.write_text(text.replace(anchor, anchor + FIELD))
    changed = subprocess.run([*git, "diff", "--stat"], capture_output=True, text=True, check=True).stdout
    assert [line.split("|")[0].strip() for line in changed.splitlines()[:-1]] == ["models/jobspec.py"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    probe = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert seen["bad"] == {"gpu_share": "must match ^[0-9]+G$, got 'lots'"}
    assert seen["kept"] == "10G"
    assert seen["defaults"] == ["1G", "1G", "1G"] and seen["documented_default"] == "1G"  # (stated once: Field("1G"))
    assert seen["form"] == ["how much of one GPU's memory the job needs (default 1G)", "text", "20G"]  # (the form's)
    assert seen["documented"] == {"ModelJobSpec": True, "CommandJobSpec": True, "JobSpec": True}
    assert seen["always_kept"]  # (a field with a default of its own: every kept spec has a value of it)
    helped = subprocess.run(
        [sys.executable, "-m", "tui.cli", "submit", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    words = " ".join(helped.stdout.split())  # (click wraps its help)
    assert helped.returncode == 0 and "--gpu-share" in words and "a part of one GPU, as 10G (default 1G)" in words
