"""The job engine: specs, queues, the RQ task, GPU-pinned workers and the `up` supervisor."""
