"""The terminal UI and the command-line client; both talk to the service only over HTTP."""
