"""Baseline for the throughput benchmark: a plain model.fit script, timed per batch after warm-up."""

import json
import sys
import time

import keras
import numpy as np

from models import zoo
from models.datasets import load

model_name, dataset, steps, batch, warmup = (
    sys.argv[1],
    sys.argv[2],
    int(sys.argv[3]),
    int(sys.argv[4]),
    int(sys.argv[5]),
)
src = load(dataset)
x = src.train.x.astype(np.float32) / 255.0
y = src.train.y
model = zoo.build(model_name, src.shape, src.num_classes)
model.compile(
    optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
stamps = []
timer = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: stamps.append(time.perf_counter()))
per_epoch = len(x) // batch
model.fit(
    x[: per_epoch * batch],
    y[: per_epoch * batch],
    batch_size=batch,
    epochs=-(-steps // per_epoch),
    steps_per_epoch=None,
    verbose=0,
    callbacks=[timer],
    shuffle=True,
)
stamps = stamps[:steps]
print(json.dumps({"images_per_sec": (len(stamps) - 1 - warmup) * batch / (stamps[-1] - stamps[warmup])}))
