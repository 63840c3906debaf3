"""The trainer: one custom tf.function training loop under whatever tf.distribute strategy applies.

Keras 3 `fit` fails under MultiWorkerMirroredStrategy (keras#20585); a step run with `strategy.run` works
under every strategy, so this one loop serves the default, Mirrored and MultiWorkerMirrored strategies.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from models import datasets, protocol, zoo
from models import params as params_mod
from models.catalog import model_info
from models.common import parse_age
from models.pipeline import Preprocess, eval_dataset, target_shape, train_dataset
from models.protocol import (
    DEFAULT_GRACE_S,
    EVENT_DIVERGED,
    EVENT_RESULT,
    EVENT_RUNNING,
    EVENT_STOPPED,
    STOP_GRACE_ENV,
    trainer_grace,
)
from models.reporting import Reporter, divergence_warning, nonfinite_warning
from models.schedules import Schedule

log = logging.getLogger("models.train")


class Stopped(Exception):
    """SIGTERM arrived; the loop saved a checkpoint and unwound."""


class Diverged(Exception):
    """The training loss became NaN or infinite at `step` (and `stop_on_nonfinite` is on)."""

    def __init__(self, step: int, loss: str):
        super().__init__(f"the training loss became {loss} at step {step}")
        self.step, self.loss = step, loss


class BadInput(ValueError):
    """The spec does not fit the data or the devices (found only once they are loaded)."""


def make_strategy() -> tf.distribute.Strategy:
    """MultiWorkerMirrored under TF_CONFIG, Mirrored over several visible GPUs, else the default."""
    if os.environ.get("TF_CONFIG"):
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def cap_gpu_memory(config: Any, environ: Any) -> str | None:
    """A share's cap (protocol.GPU_MEMORY_ENV, bytes): each visible GPU becomes one logical device of that much
    memory, set before anything touches a device, so TensorFlow never allocates past it. What it did, for the
    log (None: no share). `config`: tf.config."""
    raw = environ.get(protocol.GPU_MEMORY_ENV)
    if not raw:
        return None
    mib = int(raw) >> 20
    gpus = config.list_physical_devices("GPU")
    if not gpus:
        return f"gpu_memory {mib} MiB: TensorFlow sees no GPU here, nothing to cap"
    for gpu in gpus:
        config.set_logical_device_configuration(gpu, [config.LogicalDeviceConfiguration(memory_limit=mib)])
    return f"gpu_memory: TensorFlow's GPU capped at {mib} MiB (a logical device with memory_limit)"


def chief_and_task(strategy: tf.distribute.Strategy) -> tuple[bool, str]:
    """Whether this process writes the job dir (the chief, or worker 0 when there is no chief), and its task."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True, ""
    task_type, task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "chief" or (task_type == "worker" and task_id == 0 and not has_chief), f"{task_type}{task_id}"


def make_optimizer(p: dict[str, Any], lr: Any) -> keras.optimizers.Optimizer:
    """The Keras optimizer the params name, with moving average and gradient accumulation when asked."""
    common: dict[str, Any] = {}
    if p["moving_average"]:
        common.update(use_ema=True, ema_momentum=p["moving_average"])
    if p["grad_accum"] > 1:
        common["gradient_accumulation_steps"] = p["grad_accum"]
    name, momentum, eps = p["optimizer"], p["momentum"], p["epsilon"]
    if name == "sgd":
        opt = keras.optimizers.SGD(lr, **common)
    elif name in ("momentum", "nesterov"):
        opt = keras.optimizers.SGD(lr, momentum=momentum, nesterov=name == "nesterov", **common)
    elif name == "adam":
        opt = keras.optimizers.Adam(lr, epsilon=eps, **common)
    elif name == "adamw":
        opt = keras.optimizers.AdamW(lr, epsilon=eps, **common)
    elif name == "rmsprop":
        opt = keras.optimizers.RMSprop(lr, rho=0.9, momentum=momentum, epsilon=eps, **common)
    else:  # params.validate refuses it first
        raise BadInput(f"unknown optimizer {name!r}")
    return opt


def default_log_every(total_steps: int) -> int:
    """About 100 points a run, but at least one every 50 steps."""
    return max(1, min(50, total_steps // 100))


class CheckpointEvery:
    """A job's `checkpoint_every`: a number of steps (200) or a duration ("90s"), besides the checkpoint at the end
    of each epoch; a preempted job loses at most that much."""

    def __init__(self, steps: int | None = None, seconds: int | None = None):
        self.steps, self.seconds = steps, seconds

    @classmethod
    def of(cls, value: Any) -> CheckpointEvery:
        if isinstance(value, int) and value > 0:
            return cls(steps=value)
        if isinstance(value, str) and value:
            return cls(seconds=parse_age(value))
        return cls()

    def due(self, step: int, last_save: float) -> bool:
        if self.steps:
            return step % self.steps == 0
        return self.seconds is not None and self.seconds > 0 and time.monotonic() - last_save >= self.seconds


class Trainer:
    """Trains one job spec into one job dir; resumable from the job dir's newest checkpoint."""

    def __init__(self, spec: dict[str, Any], job_dir: Path):
        self.spec = spec
        self.job_dir = Path(job_dir)
        info = model_info(spec["model"])
        assert info is not None, spec["model"]  # (the API refused any other)
        self.p = params_mod.resolve(spec.get("params") or {}, info.name)
        self._stop_requested = False

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        log.warning("SIGTERM: saving a checkpoint and stopping")
        self._stop_requested = True
        signal.alarm(
            int(os.environ.get(STOP_GRACE_ENV, trainer_grace(DEFAULT_GRACE_S)))
        )  # if the checkpoint hangs, SIGALRM ends us

    def _setup(self):
        """Strategy, data, model, optimizer: everything the loop needs."""
        p = self.p
        capped = cap_gpu_memory(tf.config, os.environ)  # (first: before anything touches a device)
        if capped:
            log.info("%s", capped)
        if p["mixed_precision"]:
            gpu = bool(tf.config.list_physical_devices("GPU"))
            keras.mixed_precision.set_global_policy("mixed_float16" if gpu else "mixed_bfloat16")
        strategy = make_strategy()
        self.chief, self.task = chief_and_task(strategy)
        replicas = strategy.num_replicas_in_sync
        log.info(
            "devices: CUDA_VISIBLE_DEVICES=%s GPUs=%s strategy=%s replicas=%d%s",
            os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
            [d.name for d in tf.config.list_physical_devices("GPU")],
            type(strategy).__name__,
            replicas,
            f" task={self.task}" if self.task else "",
        )
        try:
            source = datasets.load(self.spec.get("dataset_path") or self.spec["dataset"], seed=self.seed)
        except datasets.DatasetError as exc:
            raise BadInput(str(exc)) from None
        log.info("%s", source.describe())
        info = model_info(self.spec["model"])
        assert info is not None  # models.train validated the name
        shape = target_shape(source.shape, info.min_size)
        if shape != source.shape:
            log.info(
                "resizing %dx%d images to %dx%d: %s takes at least %dx%d",
                *source.shape[:2],
                *shape[:2],
                info.name,
                info.min_size,
                info.min_size,
            )
        batch = p["batch_size"]
        if batch % replicas:
            raise BadInput(f"batch_size {batch} does not split evenly across {replicas} replicas")
        if batch > source.train.size:
            raise BadInput(f"batch_size {batch} is larger than the training set ({source.train.size} images)")
        steps_per_epoch = source.train.size // batch
        total = params_mod.total_steps(self.spec.get("params") or {}, p, steps_per_epoch)
        schedule = Schedule(
            p["lr"],
            p["schedule"],
            total,
            steps_per_epoch,
            p["boundaries"],
            p["decay_rate"],
            p["decay_epochs"],
            round(p["warmup_epochs"] * steps_per_epoch),
        )
        with strategy.scope():
            model = zoo.build(info.name, shape, source.num_classes, weight_decay=p["weight_decay"])
            optimizer = make_optimizer(p, schedule)
            if keras.mixed_precision.global_policy().name == "mixed_float16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(model.trainable_variables)
            step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        log.info(
            "model %s: %s parameters, input %s, %s classes",
            model.name,
            f"{model.count_params():,}",
            "x".join(map(str, shape)),
            source.num_classes,
        )
        pre = Preprocess(source, params_mod.parse_augment(p["augment"]), shape, p["seed"])
        return strategy, source, model, optimizer, step_var, pre, steps_per_epoch, total

    @property
    def seed(self) -> int:
        return self.p["seed"] if self.p["seed"] is not None else 0

    def run(self) -> dict[str, Any]:
        """Train, evaluate, export; returns the result written to result.json."""
        signal.signal(signal.SIGTERM, self._on_sigterm)
        started = time.time()
        p = self.p
        self.job_dir.mkdir(parents=True, exist_ok=True)
        if p["seed"] is not None:
            keras.utils.set_random_seed(p["seed"])
        strategy, source, model, optimizer, step_var, pre, steps_per_epoch, total_steps = self._setup()
        batch = p["batch_size"]
        log_every = p["log_every"] or default_log_every(total_steps)

        # Every task saves (the save is collective); only the chief's copy is the job's.
        ckpt_dir = self.job_dir / "checkpoints" if self.chief else self.job_dir / f".checkpoints-{self.task}"
        ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
        for partial in ckpt_dir.glob("*_temp*"):  # a save that a full disk (or a kill) cut short: never restored
            shutil.rmtree(partial, ignore_errors=True) if partial.is_dir() else partial.unlink(missing_ok=True)
        keep = protocol.keep_checkpoints(os.environ.get(protocol.KEEP_CHECKPOINTS_ENV))
        manager = tf.train.CheckpointManager(ckpt, str(ckpt_dir), max_to_keep=keep)
        if manager.latest_checkpoint:
            ckpt.restore(manager.latest_checkpoint).expect_partial()
            log.info("resumed from %s at step %d", manager.latest_checkpoint, int(step_var.numpy()))

        smoothing, classes = p["label_smoothing"], source.num_classes
        sums = {k: tf.Variable(0.0, trainable=False, name=f"sum_{k}") for k in ("loss", "correct", "n")}
        # The first step whose loss was not finite (0: none yet), kept on the device: no sync a step to watch it.
        bad_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_step")

        def forward(x):
            return model(x, training=True)

        if p["remat"]:
            # keras.RematScope fails inside tf.function on the TF backend (custom_gradient refuses the
            # layers' keyword arguments); recomputing the whole forward pass keeps only the inputs alive.
            # Side effect: BN moving statistics are also updated in the recomputation.
            forward = tf.recompute_grad(forward)

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                logits = tf.cast(forward(x), tf.float32)
                if smoothing:
                    per_example = keras.losses.categorical_crossentropy(
                        tf.one_hot(y, classes), logits, from_logits=True, label_smoothing=smoothing
                    )
                else:
                    per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
                if model.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n([tf.cast(v, tf.float32) for v in model.losses]))
                scaled = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=y.dtype), y), tf.float32)
            return loss, tf.reduce_sum(hits)

        # Traced without AutoGraph (here and in the evaluation step): neither has Python control flow over tensors
        # (the `if`s read the spec and the model, once), and AutoGraph's conversion of each function (parsing its
        # source, rewriting it, writing a module to the temp dir) cost every job ~0.3 CPU-s of start-up.
        step_fn = tf.function(replica_step, jit_compile=True, autograph=False) if p["xla"] else replica_step

        @tf.function(autograph=False)
        def train_step(iterator):
            x, y = next(iterator)
            loss, correct = strategy.run(step_fn, (x, y))
            loss = strategy.reduce("SUM", loss, axis=None)
            sums["loss"].assign_add(loss)
            sums["correct"].assign_add(strategy.reduce("SUM", correct, axis=None))
            sums["n"].assign_add(1.0)
            step_var.assign_add(1)
            first_bad = tf.logical_and(tf.equal(bad_step, 0), tf.logical_not(tf.math.is_finite(loss)))
            bad_step.assign(tf.where(first_bad, step_var, bad_step))

        def check_finite() -> None:
            """Raise Diverged once a step's loss was not finite (read where the loop syncs anyway)."""
            at = int(bad_step.numpy()) if p["stop_on_nonfinite"] else 0
            if at:
                total = float(sums["loss"].numpy())
                raise Diverged(at, "inf" if total in (float("inf"), float("-inf")) else "nan")

        eval_step = self._eval_step(strategy, model, classes)
        reporter = Reporter(self.job_dir, enabled=self.chief)
        step = int(step_var.numpy())
        reporter.event(
            EVENT_RUNNING,
            step=step,
            total_steps=total_steps,
            steps_per_epoch=steps_per_epoch,
            epochs=total_steps / steps_per_epoch,
            pid=os.getpid(),
        )
        train_ds = train_dataset(source, pre, batch, p["seed"]).with_options(_shard_by_data())
        iterator = iter(strategy.experimental_distribute_dataset(train_ds))
        val_split = source.validation or source.test
        # A set without a validation split is validated on its test split: after the last step that pass is the
        # test's own (same weights, same images), and the result takes it instead of evaluating again.
        last_validation: tuple[int, dict[str, float]] | None = None
        train_images, train_time = 0, 0.0
        first_loss, peak_loss = None, 0.0  # of this attempt's metric points: did it diverge without a NaN?
        last_loss: float | None = None
        try:
            # A window runs from one metric point to the next; evaluation time inside it is left out.
            window_start, window_step, paused = time.perf_counter(), step, 0.0
            every, last_save = CheckpointEvery.of(self.spec.get("checkpoint_every")), time.monotonic()
            while step < total_steps:
                if self._stop_requested:
                    raise Stopped()
                train_step(iterator)
                step += 1
                if step % log_every == 0 or step == total_steps:
                    n = float(sums["n"].numpy()) or 1.0
                    elapsed = time.perf_counter() - window_start - paused
                    images = (step - window_step) * batch
                    if window_step > 0 or step > log_every:  # the first window holds tracing time
                        train_images += images
                        train_time += elapsed
                    loss = float(sums["loss"].numpy()) / n
                    first_loss = loss if first_loss is None else first_loss
                    peak_loss = max(peak_loss, loss)  # (a NaN never wins)
                    last_loss = loss
                    reporter.point(
                        {
                            "step": step,
                            "epoch": round(step / steps_per_epoch, 4),
                            "loss": loss,
                            "accuracy": float(sums["correct"].numpy()) / (n * batch),
                            "lr": float(f"{float(optimizer.learning_rate.numpy()):.6g}"),
                            "images_per_sec": round(images / elapsed, 1) if elapsed > 0 else None,
                            "time": round(time.time(), 3),
                        }
                    )
                    check_finite()  # after the point, so the log and the curves show the bad loss
                    for v in sums.values():
                        v.assign(0.0)
                    window_start, window_step, paused = time.perf_counter(), step, 0.0
                if step % steps_per_epoch == 0 or step == total_steps:
                    check_finite()  # never evaluate or save broken weights
                    eval_start = time.perf_counter()
                    val = self._evaluate(strategy, eval_step, val_split, pre, batch)
                    last_validation = step, val
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
                    last_save = time.monotonic()
                    paused += time.perf_counter() - eval_start
                elif every.due(step, last_save):
                    check_finite()
                    save_start = time.perf_counter()
                    manager.save(checkpoint_number=step)
                    last_save = time.monotonic()
                    paused += time.perf_counter() - save_start
        except Stopped:
            try:
                check_finite()
            except Diverged:
                log.warning("stopped at step %d; the loss was not finite, so no checkpoint was saved", step)
                reporter.event(EVENT_STOPPED, step=step, checkpoint_step=None)
            else:
                manager.save(checkpoint_number=step)
                log.warning("stopped at step %d; checkpoint saved", step)
                reporter.event(EVENT_STOPPED, step=step, checkpoint_step=step)
            reporter.close()
            raise
        except Diverged as exc:
            kept = int(manager.latest_checkpoint.rsplit("-", 1)[1]) if manager.latest_checkpoint else None
            log.error(
                "%s; stopped without saving. %s (stop_on_nonfinite=false trains on)",
                exc,
                f"The checkpoint of step {kept} is kept" if kept is not None else "No checkpoint was saved before it",
            )
            reporter.event(EVENT_DIVERGED, step=exc.step, loss=exc.loss, checkpoint_step=kept)
            reporter.close()
            raise
        if p["moving_average"]:
            optimizer.finalize_variable_values(model.trainable_variables)  # evaluate and export the averages
            log.info("evaluating with the moving average of the weights (decay %s)", p["moving_average"])
        if val_split is source.test and last_validation and last_validation[0] == step and not p["moving_average"]:
            test = last_validation[1]
        else:
            test = self._evaluate(strategy, eval_step, source.test, pre, batch)
        result = {
            "test_accuracy": test["accuracy"],
            "test_top5": test["top5"],
            "test_loss": test["loss"],
            "steps": step,
            "epochs": round(step / steps_per_epoch, 4),
            "images_per_sec": round(train_images / train_time, 1) if train_time else None,
            "duration_s": round(time.time() - started, 2),
            "gpus_seen": len(tf.config.list_physical_devices("GPU")),  # (what TensorFlow found: gpudeck doctor)
        }
        warning = nonfinite_warning(result, last_loss) or divergence_warning(
            first_loss, peak_loss, test["accuracy"], classes, p["lr"], test["loss"]
        )
        if warning:
            result["warning"] = warning
            log.warning("%s", warning)
        if self.chief:  # each written aside and renamed: a full disk never leaves half a file in their place
            partial = self.job_dir / ".model.partial.keras"
            model.save(partial)
            os.replace(partial, self.job_dir / "model.keras")
            partial = self.job_dir / ".result.partial.json"
            partial.write_text(json.dumps(result, indent=2) + "\n")
            os.replace(partial, self.job_dir / "result.json")
        reporter.event(EVENT_RESULT, **result)
        reporter.close()
        log.info("result %s", json.dumps(result))
        return result

    @staticmethod
    def _eval_step(strategy, model, classes: int):
        """One evaluation step (sums of cross-entropy, top-1 and top-k hits, count), traced once for the run: a
        function built per evaluation would trace the whole forward pass again every epoch (seconds each)."""
        k = min(5, classes)

        @tf.function(reduce_retracing=True, autograph=False)  # the last, partial batch reuses the trace
        def eval_step(x, y):
            def replica(x, y):
                logits = tf.cast(model(x, training=False), tf.float32)
                ce = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                top1 = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=y.dtype), y), tf.float32)
                topk = tf.cast(tf.math.in_top_k(y, logits, k), tf.float32)
                return tf.reduce_sum(ce), tf.reduce_sum(top1), tf.reduce_sum(topk), tf.cast(tf.size(y), tf.float32)

            return [strategy.reduce("SUM", v, axis=None) for v in strategy.run(replica, (x, y))]

        return eval_step

    @staticmethod
    def _evaluate(strategy, eval_step, split, pre: Preprocess, batch: int) -> dict[str, float]:
        """Cross-entropy, top-1 and top-5 accuracy over one split."""
        totals = [0.0, 0.0, 0.0, 0.0]
        ds = eval_dataset(split, pre, batch).with_options(_shard_by_data())
        for x, y in strategy.experimental_distribute_dataset(ds):
            for i, v in enumerate(eval_step(x, y)):
                totals[i] += float(v)
        n = totals[3] or 1.0
        return {"loss": totals[0] / n, "accuracy": totals[1] / n, "top5": totals[2] / n}


def _shard_by_data() -> tf.data.Options:
    """Split batches between workers by element, so in-memory datasets shard under MultiWorkerMirrored too."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options
