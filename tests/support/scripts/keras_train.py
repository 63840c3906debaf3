"""A user's own Keras script, as one would write it without gpudeck: reads $DATA_DIR, logs with the Keras
TensorBoard callback into $TENSORBOARD_DIR, writes $JOB_DIR/result.json. Nothing here imports gpudeck."""

import argparse
import json
import os

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

keras.utils.set_random_seed(int(os.environ.get("SEED", "0")))
data = np.load(os.path.join(os.environ["DATA_DIR"], "digits.npz"))
model = keras.Sequential(
    [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10, activation="softmax")]
)
model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(
    data["x_train"],
    data["y_train"],
    validation_split=0.2,
    epochs=args.epochs,
    batch_size=32,
    verbose=2,
    callbacks=[keras.callbacks.TensorBoard(log_dir=os.environ["TENSORBOARD_DIR"])],
)
loss, accuracy = model.evaluate(data["x_test"], data["y_test"], verbose=0)
with open(os.path.join(os.environ["JOB_DIR"], "result.json"), "w") as f:
    json.dump({"test_accuracy": float(accuracy), "test_loss": float(loss)}, f)
