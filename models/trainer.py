"""The trainer: one custom tf.function training loop under whatever tf.distribute strategy applies."""
from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import tensorflow as tf

from models import datasets, zoo
from models import params as params_mod
from models.reporting import Reporter

log = logging.getLogger("models.train")

STOP_GRACE_ENV = "GPUDECK_STOP_GRACE"
"""Seconds the trainer has after SIGTERM to checkpoint before it ends itself (default 25)."""

EXIT_STOPPED = 143
"""Exit status after a SIGTERM-requested stop (128 + SIGTERM), like a shell reports it."""


class Stopped(Exception):
    """SIGTERM arrived; the loop saved a checkpoint and unwound."""


class BadInput(ValueError):
    """The spec does not fit the data or the devices (found only once they are loaded)."""


def make_strategy() -> tf.distribute.Strategy:
    """MultiWorkerMirrored under TF_CONFIG, Mirrored over several visible GPUs, else the default."""
    if os.environ.get("TF_CONFIG"):
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def make_optimizer(p: dict[str, Any]) -> Any:
    """The Keras optimizer the params name."""
    import keras

    lr, momentum = p["lr"], p["momentum"]
    name = p["optimizer"]
    if name == "sgd":
        return keras.optimizers.SGD(lr)
    if name in ("momentum", "nesterov"):
        return keras.optimizers.SGD(lr, momentum=momentum, nesterov=name == "nesterov")
    if name == "adam":
        return keras.optimizers.Adam(lr)
    if name == "adamw":
        return keras.optimizers.AdamW(lr)
    if name == "rmsprop":
        return keras.optimizers.RMSprop(lr, momentum=momentum)
    raise ValueError(f"unknown optimizer {name!r}")  # params.validate refuses it first


def default_log_every(total_steps: int) -> int:
    """About 100 points a run, but at least one every 50 steps."""
    return max(1, min(50, total_steps // 100))


class Trainer:
    """Trains one job spec into one job dir; resumable from the job dir's newest checkpoint."""

    def __init__(self, spec: dict[str, Any], job_dir: Path):
        self.spec = spec
        self.job_dir = Path(job_dir)
        self.p = params_mod.resolve(spec.get("params") or {})
        self._stop_requested = False

    # -- signals -----------------------------------------------------------------------------
    def _on_sigterm(self, signum: int, frame: Any) -> None:
        log.warning("SIGTERM: saving a checkpoint and stopping")
        self._stop_requested = True
        # If the checkpoint hangs, SIGALRM's default action ends the process.
        signal.alarm(int(os.environ.get(STOP_GRACE_ENV, "25")))

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train, evaluate, export; returns the result written to result.json."""
        signal.signal(signal.SIGTERM, self._on_sigterm)
        started = time.time()
        p = self.p
        self.job_dir.mkdir(parents=True, exist_ok=True)
        seed = p["seed"] if p["seed"] is not None else 0
        if p["seed"] is not None:
            import keras

            keras.utils.set_random_seed(p["seed"])

        strategy = make_strategy()
        replicas = strategy.num_replicas_in_sync
        log.info(
            "devices: CUDA_VISIBLE_DEVICES=%s GPUs=%s strategy=%s replicas=%d",
            os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
            [d.name for d in tf.config.list_physical_devices("GPU")],
            type(strategy).__name__,
            replicas,
        )
        data = datasets.load(self.spec["dataset"], seed=seed)
        batch = p["batch_size"]
        if batch % replicas:
            raise BadInput(f"batch_size {batch} does not split evenly across {replicas} replicas")
        if batch > len(data.x_train):
            raise BadInput(f"batch_size {batch} is larger than the training set ({len(data.x_train)} images)")
        steps_per_epoch = len(data.x_train) // batch
        total_steps = p["steps"] if p["steps"] is not None else p["epochs"] * steps_per_epoch
        log_every = p["log_every"] or default_log_every(total_steps)
        log.info(
            "dataset %s: %d train / %d test images of %s, %d classes; %d steps of batch %d (%d per epoch)",
            data.name, len(data.x_train), len(data.x_test), "x".join(map(str, data.shape)),
            data.num_classes, total_steps, batch, steps_per_epoch,
        )  # fmt: skip

        with strategy.scope():
            model = zoo.build(self.spec["model"], data.shape, data.num_classes, weight_decay=p["weight_decay"])
            optimizer = make_optimizer(p)
            optimizer.build(model.trainable_variables)
            step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        log.info("model %s: %s parameters", model.name, f"{model.count_params():,}")

        ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
        manager = tf.train.CheckpointManager(ckpt, str(self.job_dir / "checkpoints"), max_to_keep=2)
        if manager.latest_checkpoint:
            ckpt.restore(manager.latest_checkpoint).expect_partial()
            log.info("resumed from %s at step %d", manager.latest_checkpoint, int(step_var.numpy()))

        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        sums = {k: tf.Variable(0.0, trainable=False, name=f"sum_{k}") for k in ("loss", "correct", "n")}

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=batch)
                if model.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=y.dtype), y), tf.float32)
            return loss, tf.reduce_sum(hits)

        @tf.function
        def train_step(iterator):
            x, y = next(iterator)
            loss, correct = strategy.run(replica_step, (x, y))
            sums["loss"].assign_add(strategy.reduce("SUM", loss, axis=None))
            sums["correct"].assign_add(strategy.reduce("SUM", correct, axis=None))
            sums["n"].assign_add(1.0)
            step_var.assign_add(1)

        reporter = Reporter(self.job_dir)
        step = int(step_var.numpy())
        reporter.event(
            "running", step=step, total_steps=total_steps, steps_per_epoch=steps_per_epoch,
            epochs=total_steps / steps_per_epoch, pid=os.getpid(),
        )  # fmt: skip
        iterator = iter(strategy.experimental_distribute_dataset(datasets.train_pipeline(data, batch, seed)))
        train_images = 0
        train_time = 0.0
        try:
            window_start, window_step = time.perf_counter(), step
            while step < total_steps:
                if self._stop_requested:
                    raise Stopped()
                train_step(iterator)
                step += 1
                if step % log_every == 0 or step == total_steps:
                    n = float(sums["n"].numpy()) or 1.0
                    elapsed = time.perf_counter() - window_start
                    images = (step - window_step) * batch
                    if window_step > 0 or step > log_every:  # the first window holds tracing time
                        train_images += images
                        train_time += elapsed
                    reporter.point(
                        {
                            "step": step,
                            "epoch": round(step / steps_per_epoch, 4),
                            "loss": float(sums["loss"].numpy()) / n,
                            "accuracy": float(sums["correct"].numpy()) / (n * batch),
                            "lr": float(f"{float(optimizer.learning_rate.numpy()):.6g}"),
                            "images_per_sec": round(images / elapsed, 1) if elapsed > 0 else None,
                            "time": round(time.time(), 3),
                        }
                    )
                    for v in sums.values():
                        v.assign(0.0)
                    window_start, window_step = time.perf_counter(), step
                if step % steps_per_epoch == 0 or step == total_steps:
                    val = self._evaluate(strategy, model, data, loss_fn, batch)
                    reporter.point(
                        {
                            "step": step,
                            "epoch": round(step / steps_per_epoch, 4),
                            "val_loss": val["loss"],
                            "val_accuracy": val["accuracy"],
                            "time": round(time.time(), 3),
                        },
                        split="validation",
                    )
                    manager.save(checkpoint_number=step)
                    window_start = time.perf_counter()
        except Stopped:
            manager.save(checkpoint_number=step)
            log.warning("stopped at step %d; checkpoint saved", step)
            reporter.close()
            raise
        test = self._evaluate(strategy, model, data, loss_fn, batch)
        model.save(self.job_dir / "model.keras")
        result = {
            "test_accuracy": test["accuracy"],
            "test_top5": test["top5"],
            "test_loss": test["loss"],
            "steps": step,
            "epochs": round(step / steps_per_epoch, 4),
            "images_per_sec": round(train_images / train_time, 1) if train_time else None,
            "duration_s": round(time.time() - started, 2),
        }
        (self.job_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        reporter.event("result", **result)
        reporter.close()
        log.info("result %s", json.dumps(result))
        return result

    @staticmethod
    def _evaluate(strategy, model, data, loss_fn, batch: int) -> dict[str, float]:
        """Loss, top-1 and top-5 accuracy over the test split (used for validation too)."""
        k = min(5, data.num_classes)

        @tf.function
        def eval_step(x, y):
            def replica(x, y):
                logits = model(x, training=False)
                top1 = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=y.dtype), y), tf.float32)
                topk = tf.cast(tf.math.in_top_k(y, logits, k), tf.float32)
                return tf.reduce_sum(loss_fn(y, logits)), tf.reduce_sum(top1), tf.reduce_sum(topk)

            out = strategy.run(replica, (x, y))
            return [strategy.reduce("SUM", v, axis=None) for v in out]

        totals = [0.0, 0.0, 0.0]
        ds = strategy.experimental_distribute_dataset(datasets.eval_pipeline(data.x_test, data.y_test, batch))
        for x, y in ds:
            for i, v in enumerate(eval_step(x, y)):
                totals[i] += float(v)
        n = len(data.y_test)
        return {"loss": totals[0] / n, "accuracy": totals[1] / n, "top5": totals[2] / n}
