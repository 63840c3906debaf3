"""Every setting is in the README's configuration table (issue 38 §3), and each default is written once."""

import re
from dataclasses import fields
from pathlib import Path

from jobs import settings
from jobs.settings import Settings
from models.protocol import KEEP_CHECKPOINTS_ENV

ROOT = Path(__file__).resolve().parents[2]


def _table() -> set[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Configuration") :]
    section = section[: section.index("\n## ", 5)]
    return set(re.findall(r"^\| `([A-Z_]+)`", section, re.M))


def test_every_variable_the_settings_read_is_in_the_readme_table():
    read = set(re.findall(r'"((?:GPUDECK|REDIS)_[A-Z_]+)"', Path(settings.__file__).read_text()))
    missing = sorted({*read, KEEP_CHECKPOINTS_ENV} - _table())
    assert missing == [], f"add these to the README's Configuration table: {missing}"


def test_unset_variables_give_the_fields_own_defaults():
    """Each field's default is the dataclass's: from_env with nothing set gives exactly them (no second copy)."""
    got = Settings.from_env({"GPUDECK_HOME": "/tmp/gpudeck-settings-test"})
    for f in fields(Settings):
        if f.name == "home":
            continue
        want = f.default_factory() if callable(f.default_factory) else f.default
        assert getattr(got, f.name) == want, f.name
