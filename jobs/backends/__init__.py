"""Where jobs run: one interface (`base.Backend`), an implementation per place (`local`: gpudeck's own workers,
`slurm`: a lab's Slurm, `stub`: nothing runs, for engine tests), one chosen per process (`base.of`)."""

IMPLEMENTATIONS = {"local": "jobs.backends.local", "slurm": "jobs.backends.slurm"}
"""GPUDECK_BACKEND's values, each the module whose `BACKEND` class implements it."""
