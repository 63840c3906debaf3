"""The TUI's screens: jobs, one job, GPUs, the submit form and the dialogs."""
