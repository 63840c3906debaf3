"""`gpudeck tf-config`: TF_CONFIG for tasks started by hand, as TensorFlow's own resolver reads it."""

from __future__ import annotations

import json
import subprocess

import pytest

from jobs.run.proc import python_module


def gpudeck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(python_module("tui.cli", "tf-config", *args), capture_output=True, text=True, timeout=60)


@pytest.mark.xdist_group("tensorflow")
def test_every_task_and_one_task_as_tensorflow_reads_it(monkeypatch):
    run = gpudeck("--chief", "h0:2222", "--worker", "h1:2222,h2:2222", "--ps", "h3:2222")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["chief:0", "worker:0", "worker:1", "ps:0"]
    one = gpudeck("--chief", "h0:2222", "--worker", "h1:2222,h2:2222", "--ps", "h3:2222", "--task", "worker:1")
    config = json.loads(one.stdout)
    assert config == json.loads(lines[2].split(" ", 1)[1])

    import tensorflow as tf

    monkeypatch.setenv("TF_CONFIG", one.stdout.strip())
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert resolver.cluster_spec().as_dict() == {
        "chief": ["h0:2222"],
        "worker": ["h1:2222", "h2:2222"],
        "ps": ["h3:2222"],
    }
    export = gpudeck("--worker", "a:1,b:2", "--task", "worker:0", "--export").stdout
    assert export.startswith("export TF_CONFIG='{") and '"task":{"type":"worker","index":0}' in export


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--worker", "h1"], "--worker: expected host:port"),
        (["--worker", "h1:99999"], "port 1-65535"),
        (["--worker", "h1:1,h1:1"], "listed twice"),
        (["--worker", "h1:1", "--chief", "h1:1"], "one task only"),
        (["--worker", "h1:1", "--task", "worker:3"], "index must be 0 to 0"),
        (["--worker", "h1:1", "--task", "ps:0"], "no 'ps' task"),
        (["--worker", "h1:1", "--task", "worker"], "TYPE:INDEX"),
    ],
)
def test_bad_clusters_exit_2_and_say_what_is_wrong(args, words):
    run = gpudeck(*args)
    assert run.returncode == 2 and words in run.stderr and "Traceback" not in run.stderr
