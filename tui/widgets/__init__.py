"""Small renderables the screens share: status colours, progress bars, sparklines, durations."""
