"""A custom training loop that logs with tf.summary (tensor scalars) and checkpoints with CheckpointManager in
$JOB_DIR: a retried attempt resumes where the newest checkpoint is. Nothing here imports gpudeck."""

import os
import time

import tensorflow as tf

total = int(os.environ.get("TOTAL_STEPS", "40"))
step = tf.Variable(0, dtype=tf.int64)
weight = tf.Variable(4.0)
checkpoint = tf.train.Checkpoint(step=step, weight=weight)
manager = tf.train.CheckpointManager(checkpoint, os.path.join(os.environ["JOB_DIR"], "checkpoints"), max_to_keep=2)
if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint)
    print(f"attempt {os.environ['GPUDECK_ATTEMPT']}: resumed at step {int(step)}", flush=True)
writer = tf.summary.create_file_writer(os.path.join(os.environ["TENSORBOARD_DIR"], "train"))
while int(step) < total:
    step.assign_add(1)
    weight.assign(weight * 0.9)
    with writer.as_default(step=int(step)):
        tf.summary.scalar("loss", float(weight) ** 2)
    writer.flush()
    if int(step) % 5 == 0:
        manager.save(checkpoint_number=int(step))
    print(f"step {int(step)}", flush=True)
    time.sleep(0.2)
