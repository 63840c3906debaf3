"""The baseline a user would write: load the same arrays, build the same model, compile, model.fit, evaluate.

python -m tests.support.plain_keras DATASET MODEL EPOCHS BATCH LR [SEED] [SCHEDULE]
SCHEDULE is `constant` or `cosine` (decay to 0 over the run, as the trainer's `cosine` schedule)."""

import json
import sys

import keras
import numpy as np

from models import zoo
from models.datasets import load

dataset, model_name, epochs, batch, lr = (
    sys.argv[1],
    sys.argv[2],
    int(sys.argv[3]),
    int(sys.argv[4]),
    float(sys.argv[5]),
)
seed = int(sys.argv[6]) if len(sys.argv) > 6 else 0
schedule = sys.argv[7] if len(sys.argv) > 7 else "constant"
keras.utils.set_random_seed(seed)
src = load(dataset)
x_train, y_train = (np.stack(a) for a in zip(*src.train.dataset().as_numpy_iterator()))
x_test, y_test = (np.stack(a) for a in zip(*src.test.dataset().as_numpy_iterator()))
steps = epochs * -(-len(x_train) // batch)  # fit runs the last, partial batch of each epoch too
rate = keras.optimizers.schedules.CosineDecay(lr, steps) if schedule == "cosine" else lr
model = zoo.build(model_name, src.shape, src.num_classes)
model.compile(
    optimizer=keras.optimizers.SGD(rate, momentum=0.9),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(x_train / 255.0, y_train, batch_size=batch, epochs=epochs, shuffle=True, verbose=0)
loss, acc = model.evaluate(x_test / 255.0, y_test, verbose=0)
print(json.dumps({"test_accuracy": acc, "test_loss": loss}))
