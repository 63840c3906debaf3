"""`gpudeck token` on the server, in-process against a real Redis: a token is printed once and only its hash is
kept; every refusal is one line naming what was wrong, with exit code 2."""

import json

import pytest

from jobs import tokens
from tui.cli import main


@pytest.fixture
def server(monkeypatch, redis_url, redis, tmp_path):
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("GPUDECK_HOME", str(tmp_path / "home"))
    return redis


def test_create_ls_revoke(server, capsys):
    assert main(["token", "create", "alice", "--max-gpus", "2", "--expires", "30d"]) == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert token.startswith("gpd_") and "shown this once" in err and "a user" in err
    assert tokens.identify(server, token)[0].name == "alice"
    assert main(["token", "ls", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["name"] == "alice" and listed["max_gpus"] == 2 and listed["expires_at"] > listed["created_at"]
    assert token not in json.dumps(listed) and "sha256" not in listed
    assert main(["token", "revoke", "alice"]) == 0 and tokens.identify(server, token)[0] is None
    entries = [f[b"path"].decode() for _, f in server.xrange("gpudeck:audit")]
    assert entries == ["create alice", "revoke alice"]
    assert main(["token", "create", "root", "--admin"]) == 0
    assert "the token of root, an admin:" in capsys.readouterr().err  # (not "a admin": issue 67 #7)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["token", "create", "Alice!"], "token name 'Alice!': 1 to 32 of a-z 0-9 _ . -"),
        (["token", "create", "bob", "--max-gpus", "-1"], "--max-gpus must be 0 or more"),
        (["token", "revoke", "nobody"], "no token named 'nobody' (gpudeck token ls lists them)"),
        (["token", "create"], "gpudeck token create NAME"),
    ],
)
def test_refusals_name_what_was_wrong(server, capsys, argv, words):
    assert main(argv) == 2
    assert words in capsys.readouterr().err


def test_a_second_token_of_one_name_is_refused(server, capsys):
    assert main(["token", "create", "bob"]) == 0
    assert main(["token", "create", "bob", "--admin"]) == 2
    assert "a token named 'bob' exists: revoke it first (gpudeck token revoke bob)" in capsys.readouterr().err
    assert [t["role"] for t in tokens.list_all(server)] == ["user"]  # the first is kept as it was


def test_without_the_stacks_redis_it_says_where_it_looked(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("GPUDECK_HOME", str(tmp_path / "home"))
    assert main(["token", "ls"]) == 2
    err = capsys.readouterr().err
    assert f"GPUDECK_HOME={tmp_path / 'home'}" in err and "REDIS_URL" in err and "Traceback" not in err
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    assert main(["token", "ls"]) == 2
    assert "cannot reach the stack's Redis (redis://127.0.0.1:1/0)" in capsys.readouterr().err
