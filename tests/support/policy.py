"""The service's defaults as a Settings, for engine tests that call the scheduler, the line or submission directly:
the engine takes its settings from its caller (no function substitutes defaults of its own)."""

import tempfile

from jobs.settings import Settings

DEFAULTS = Settings.from_env({"GPUDECK_HOME": tempfile.gettempdir()})
"""Every setting at its default (GPUDECK_HOME: the temporary folder, for the free-space check)."""
