"""The `gpudeck` command line in-process (click's CliRunner and `main`): every command's help, one-line errors and
their exit codes, --api/--token on every client command, a client command that loads nothing of the server, and
what `logs --offset` counts — on a log whose lines this test writes itself, never on TensorFlow's output."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from jobs.redis_server import free_port
from jobs.store import JobStore
from models.common import EXIT_UNREACHABLE, EXIT_USAGE
from tests.support.live import start_api
from tui.cli import cli, main
from tui.cli.base import ClientSettings, table_lines
from tui.logtext import fold, folded_line

NOWHERE = f"http://127.0.0.1:{free_port()}"
"""An API address where nothing listens."""


def every_command(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from every_command(command, ctx, (*path, name))


def test_every_command_has_complete_help():
    runner = CliRunner()
    with click.Context(cli) as ctx:
        commands = list(every_command(cli, ctx))
    names = {" ".join(p) for p, _ in commands}
    assert {"submit", "run", "ls", "datasets upload", "sweep show", "token create", "up", "worker", "api"} <= names
    for path, command in commands:
        out = runner.invoke(cli, [*path, "--help"])
        assert out.exit_code == 0, (path, out.output)
        assert out.output.startswith(f"Usage: gpudeck {' '.join(path)}"), out.output
        assert (command.help or "").strip(), f"gpudeck {' '.join(path)} has no help text"
        for param in command.params:  # every option says what it is for
            if isinstance(param, click.Option) and param.name not in ("help",):
                assert param.help, f"gpudeck {' '.join(path)} {param.opts[0]} has no help"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["logs", "1", "--tail", "-1"], "gpudeck logs: --tail: must be a whole number of 0 or more, got '-1'"),
        (["rm", "--older-than", "soon", "--status", "failed"], "--older-than: write a duration such as 90m, 1h30m"),
        (["wait", "1", "--timeout", "soon"], "gpudeck wait: --timeout: write seconds (3600) or a duration such as 90m"),
        (["submit", "--model", "lenet", "--dataset", "x", "--param", "lr"], "--param: takes KEY=VALUE, got 'lr'"),
        (["submit", "--model", "lenet"], "Missing option '--dataset'"),
        (["submit", "--model", "lenet", "--dataset", "x", "--priority", "urgent"], "'urgent' is not one of"),
        (["wait", "seven"], "'seven' is not a valid integer"),
        (["run"], "gpudeck run: give the command after --"),
        (["rm"], "gpudeck rm: name the jobs"),
        (["rm", "3", "--status", "failed"], "not both"),
        (["rm", "--status", "running"], "--status takes ended statuses"),
        (["ls", "--mine", "--owner", "bob"], "give one"),
        (["datasets", "upload", "nover", "x.tgz"], "gpudeck datasets upload: NAME:VERSION FILE"),
        (["sweep", "show", "abc"], "'abc' is not a valid integer"),
        (["nosuch"], "No such command 'nosuch'"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(argv, words, capsys):
    assert main([*argv, "--api", NOWHERE]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_api_and_token_are_options_of_every_client_command(capsys, monkeypatch):
    monkeypatch.setenv("GPUDECK_API", "http://127.0.0.1:9")  # the option wins over the variable
    for argv in (["ls", "--api", NOWHERE], ["--api", NOWHERE, "ls"], ["show", "1", "--api", NOWHERE, "--token", "t"]):
        assert main(argv) == EXIT_UNREACHABLE, argv
        assert f"cannot reach the gpudeck API at {NOWHERE}" in capsys.readouterr().err
    runner = CliRunner()
    out = runner.invoke(cli, ["whoami", "--api", NOWHERE])  # CliRunner: the same exit code as main()
    assert out.exit_code == EXIT_UNREACHABLE and NOWHERE in out.output


def test_a_client_never_reads_the_servers_variables(capsys, monkeypatch):
    """A bad server setting in a user's shell (GPUDECK_RETENTION, GPUDECK_ENVS) does not break `gpudeck ls`."""
    monkeypatch.setenv("GPUDECK_RETENTION", "failed:forever")
    monkeypatch.setenv("GPUDECK_ENVS", "no-equals-sign")
    assert main(["ls", "--api", NOWHERE]) == EXIT_UNREACHABLE
    assert "RETENTION" not in capsys.readouterr().err
    s = ClientSettings.from_env({"GPUDECK_API": "http://h:1/", "GPUDECK_TOKEN": "t"})
    assert (s.api_url, s.token) == ("http://h:1", "t")
    with pytest.raises(ValueError, match="GPUDECK_SOURCE_MAX_BYTES must be a size"):
        _ = ClientSettings.from_env({"GPUDECK_SOURCE_MAX_BYTES": "big"}).source_max_bytes


def test_a_client_command_loads_nothing_of_the_server():
    probe = (
        "import sys\n"
        "from tui.cli import main\n"
        f"main(['ls', '--api', '{NOWHERE}'])\n"
        "main(['--help'])\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'redis', 'gunicorn', 'jobs', 'api', 'rq', 'flask'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_a_server_command_loads_none_of_the_clients_commands():
    """`gpudeck api` and `gpudeck worker` start without the client's families (their HTTP client, YAML), and every
    client command is still there after a server command was looked up."""
    probe = (
        "import sys\n"
        "from tui.cli import cli, main\n"
        "main(['api', '--help']); main(['worker', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('tui.cli.') or m in ('requests', 'yaml')))\n"
        "print(' '.join(cli.list_commands(None)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    loaded, names = out.stdout.strip().splitlines()[-2:]
    assert loaded == "['tui.cli.base']", out.stdout + out.stderr
    assert {"submit", "ls", "logs", "datasets", "doctor", "api", "worker", "up"} <= set(names.split()), names


def test_tables_are_aligned_and_carry_no_trailing_spaces():
    lines = table_lines(("ID", "NAME", "LOSS"), [(7, "a", "0.5"), (123, "longer name", None)], right=[0, 2])
    assert lines == [" ID  NAME         LOSS", "  7  a             0.5", "123  longer name"]


@pytest.fixture
def api_with_a_log(spawn, child_env, redis):
    """A live API and job 1, whose log this test writes: 2 plain lines, 3 TensorFlow start-up lines, 2 more."""
    url = start_api(spawn, child_env)
    store = JobStore(redis)
    store.create(1, {"model": "lenet", "dataset": "synthetic", "gpus": 0}, "gpus-0")
    lines = [
        "first line",
        "second line",
        "2026-11-24 06:00:00.000001: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.",
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "2026-11-24 06:00:00.000002: I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow binary",
        "train step 1",
        "train step 2",
    ]
    pipe = redis.pipeline()
    store.append_lines(1, lines, pipe)
    pipe.execute()
    return url, lines


def test_logs_offset_counts_lines_as_written_then_folds(api_with_a_log, capsys):
    """--offset N skips N lines of the log as written (what the API's X-Next-Offset counts), then folds what is
    left: the same lines whether a banner run falls before or after the offset."""
    url, lines = api_with_a_log
    assert fold(lines)[2] == folded_line(3)  # (the three start-up lines are one run)

    def logs(*argv: str) -> list[str]:
        assert main(["logs", "1", *argv, "--api", url]) == 0
        return capsys.readouterr().out.splitlines()

    assert logs() == fold(lines)
    assert logs("--raw") == lines
    for offset in range(len(lines) + 2):
        assert logs("--offset", str(offset)) == fold(lines[offset:]), offset
        assert logs("--offset", str(offset), "--raw") == lines[offset:], offset
    assert logs("--offset", "4") == lines[4:]  # a run the offset cuts below FOLD_MIN is shown as it is
    assert logs("--tail", "2") == lines[-2:]
    assert logs("--offset", "1", "--tail", "3") == fold(lines[1:])[-3:]


def test_run_passes_every_word_after_the_command_to_it():
    """`gpudeck run python t.py --epochs 3` and `gpudeck run -- …`: gpudeck's options end where the command starts."""
    from tui.cli.jobs import run

    for argv, words in (
        (["--no-source", "--", "python", "t.py", "--name", "x"], ("python", "t.py", "--name", "x")),
        (["--no-source", "python", "t.py", "--epochs", "3"], ("python", "t.py", "--epochs", "3")),
        (["--name", "n", "--", "sh", "-c", "echo $DATA_DIR"], ("sh", "-c", "echo $DATA_DIR")),
    ):
        ctx = run.make_context("run", argv)
        assert ctx.params["command"] == words, argv


def test_several_ids_each_with_its_outcome_and_durations_where_seconds_go(api_with_a_log, redis, capsys, monkeypatch):
    """Issue 25 #12/#13: `rm 1 424242` deletes 1 and says so, names 424242 on stderr, exits 1; `cancel` and `retry`
    take several ids or a selection; `--timeout 5m` is 300 s; `rm --dry-run` prints one id a line."""
    url, _ = api_with_a_log
    store = JobStore(redis)
    store.transition(1, ("queued",), status="succeeded", ended_at=1.0)
    assert main(["rm", "--status", "succeeded", "--older-than", "1d", "--dry-run", "--api", url]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == ["1"] and "would delete 1 job" in out.err
    assert main(["rm", "1", "424242", "--api", url]) == 1
    out = capsys.readouterr()
    assert out.out.startswith("deleted 1 job: 1 (") and "gpudeck rm: job 424242 does not exist" in out.err
    assert "job 424242: job 424242" not in out.err  # (issue 67 #7: the job named once)
    for _ in range(3):
        assert main(["submit", "--model", "lenet", "--dataset", "synthetic", "--gpus", "1", "--timeout", "5m",
                     "--tag", "batch", "--api", url]) == 0  # fmt: skip
    capsys.readouterr()
    ids = [int(i) for i in redis.zrange("gpudeck:jobs", 0, -1)]
    assert [store.get(i)["spec"]["timeout"] for i in ids] == [300, 300, 300]
    assert main(["cancel", str(ids[0]), "999", "--api", url]) == 1
    out = capsys.readouterr()
    assert out.out.strip() == f"job {ids[0]}: canceled" and "job 999" in out.err
    from tui.client import Client

    real = Client.cancel

    def ended_meanwhile(self, job_id):  # (the job at ids[2] ends between the listing and its cancel)
        if job_id == ids[2]:
            store.transition(job_id, ("queued",), status="succeeded", ended_at=2.0)
        return real(self, job_id)

    monkeypatch.setattr(Client, "cancel", ended_meanwhile)
    assert main(["cancel", "--tag", "batch", "--status", "queued", "--api", url]) == 0  # (issue 67 #7)
    assert f"job {ids[2]}: succeeded meanwhile" in capsys.readouterr().err
    assert [store.get(i)["status"] for i in ids] == ["canceled", "canceled", "succeeded"]
    store.transition(ids[2], ("succeeded",), status="canceled")
    capsys.readouterr()
    assert main(["retry", str(ids[1]), str(ids[2]), "--api", url]) == 0
    assert capsys.readouterr().out.count("resubmitted as job") == 2
    assert main(["submit", "--model", "lenet", "--dataset", "synthetic", "--timeout", "soon", "--api", url]) == 2
    assert "--timeout: write seconds (3600) or a duration such as 90m, 1h30m or 12h" in capsys.readouterr().err


def test_a_run_that_diverged_without_a_nan_is_warned_of_and_numbers_read_as_numbers(api_with_a_log, redis, capsys):
    """Issue 25 #15 and #7: a job whose trainer's result carries a divergence warning shows it in `show` (its own
    row, not a result value) and `ls` (⚠ beside the status); a huge loss reads in e-notation, a duration and a rate
    as such, not to four decimals; a progress without a step yet reads `-/10`, not `None/10` (issue 24 #4)."""
    from models.reporting import divergence_warning

    url, _ = api_with_a_log
    store = JobStore(redis)
    warning = divergence_warning(2.31, 9.6e9, 0.0996, 10, 100.0)
    result = {"test_accuracy": 0.0996, "test_loss": 6.38e32, "duration_s": 36.33, "images_per_sec": 230.4}
    store.transition(1, ("queued",), status="succeeded", ended_at=1.0, result={**result, "warning": warning},
                     metrics={"loss": 638229155746993758071904465321984.0})  # fmt: skip
    assert main(["show", "1", "--api", url]) == 0
    out = capsys.readouterr().out
    assert f"  warning  {warning}" in out and "grew from 2.31 to 9.6e+09" in out and "at chance" in out
    assert "result  " in out and "  warning  " not in out.split("result  ", 1)[1]  # not a result value too
    assert "6.380e+32" in out and "36.3s" in out and "230.4" in out and "36.3300" not in out
    assert main(["wait", "1", "--api", url]) == 0  # it succeeded; a waiting CI log says with what warning
    assert f"gpudeck: job 1 succeeded with a warning: {warning}" in capsys.readouterr().err
    assert main(["wait", "1", "--min-accuracy", "0.5", "--api", url]) == 1  # the gate that fails it
    assert main(["ls", "--api", url]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert "succeeded⚠" in row and "6.382e+32" in row, row

    store.create(2, {"command": ["true"], "total_steps": 10, "gpus": 0}, "gpus-0")
    store.update(2, status="running", progress={"step": None, "total_steps": 10})
    assert main(["ls", "--api", url]) == 0
    assert " -/10 " in capsys.readouterr().out
    assert main(["show", "2", "--api", url]) == 0
    assert "step -/10" in capsys.readouterr().out


def test_show_folds_tensorflows_start_up_lines_in_a_failed_jobs_tail(api_with_a_log, redis, capsys):
    """Issue 25 #6: the reason, not TensorFlow's chatter, where a failed job's tail is shown."""
    url, lines = api_with_a_log
    JobStore(redis).transition(1, ("queued",), status="failed", reason="exit_nonzero", ended_at=1.0, log_tail=lines)
    assert main(["show", "1", "--api", url]) == 0
    shown = [line[11:] for line in capsys.readouterr().out.splitlines() if line.startswith("      log  ")]
    assert shown == fold(lines) and folded_line(3) in shown and not any("cpu_feature_guard" in s for s in shown)


def test_one_duration_grammar_everywhere():
    """Issue 38 §3: the API, the CLI, the TUI's form and the settings read durations alike (models.common)."""
    from models.common import parse_age, parse_duration
    from tui.cli.base import Age, Duration
    from tui.screens.submit import seconds

    for text, want in (("90", 90), ("90s", 90), ("30m", 1800), ("1h30m", 5400), ("2d12h", 216000)):
        assert parse_duration(text) == Duration().convert(text, None, None) == seconds(text) == want
        if not text.isdigit():
            assert parse_age(text) == Age().convert(text, None, None) == want
    for bad in ("soon", "1.5h", "h", "-5m", ""):
        assert seconds(bad) is None
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_drain_is_a_client_command(api_with_a_log, redis, capsys):
    """Issue 38 §3: `gpudeck drain NAME` asks the API (the server's `worker` command no longer calls it)."""
    url, _ = api_with_a_log
    from rq import Worker

    Worker(["cpu"], connection=redis, name="node-a.gpu0.1").register_birth()  # (RQ's registry: a live worker)
    assert main(["drain", "node-a.gpu0.1", "--api", url]) == 0
    assert capsys.readouterr().out.strip() == "worker node-a.gpu0.1: draining"
    assert redis.get("gpudeck:worker:node-a.gpu0.1:drain") is not None
    assert main(["drain", "nobody", "--api", url]) == 2
    assert "nobody" in capsys.readouterr().err
    assert main(["worker", "--drain", "x"]) == 2  # (no such option any more: one clear line)


def test_a_session_host_is_local_by_this_machines_own_names_and_addresses(monkeypatch):
    """Whether `gpudeck session attach` goes direct or through ssh: this machine's names and the addresses of its
    interfaces are local (as is the name its workers advertise, in a shell that shares their environment)."""
    import socket

    from tui.attach import local_host

    monkeypatch.delenv("GPUDECK_ADVERTISE_HOST", raising=False)
    assert local_host("127.0.0.1") and local_host("localhost") and local_host(socket.gethostname())
    assert not local_host("203.0.113.9") and not local_host("no-such-host.invalid") and not local_host("gpu-box-7")
    monkeypatch.setenv("GPUDECK_ADVERTISE_HOST", "gpu-box-7")
    assert local_host("gpu-box-7")


def test_compare_of_one_job_is_a_usage_error_in_the_clis_words(capsys):
    """Issue 67 #7: `gpudeck compare 1` answered with the API's words (query argument jobs: …); the CLI's own."""
    assert main(["compare", "1", "--api", "http://127.0.0.1:9"]) == 2  # (nothing asked of any API)
    err = capsys.readouterr().err
    assert "name at least two jobs to compare, e.g. gpudeck compare 12 15" in err and "query argument" not in err
