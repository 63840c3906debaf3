"""TensorBoard event files as a script's writer leaves them, written without TensorFlow (the `tensorboard`
package's own writer), for the tests of what the work-horse reads from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util


def scalar_event(step: int, **values: float) -> event_pb2.Event:
    """One event with scalars the old way (simple_value)."""
    return event_pb2.Event(
        step=step,
        summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        ),
    )


def tensor_event(step: int, tag: str, value, plugin: str = "scalars") -> event_pb2.Event:
    """One value the tf.summary v2 way: a tensor, with the plugin named in its metadata."""
    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin))
    v = summary_pb2.Summary.Value(
        tag=tag, tensor=tensor_util.make_tensor_proto(np.asarray(value, np.float32)), metadata=meta
    )
    return event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[v]))


def write(folder: Path, *events: event_pb2.Event) -> EventFileWriter:
    w = EventFileWriter(str(folder))
    for e in events:
        w.add_event(e)
    w.flush()
    return w
