"""A user's Keras script to be searched, as written without gpudeck: its learning rate from $LR, its curves
through the Keras TensorBoard callback (histogram_freq=1 flushes them each epoch), a pause each epoch standing
in for a bigger model. Nothing here imports gpudeck."""

import json
import os
import time

import keras
import numpy as np

keras.utils.set_random_seed(0)
data = np.load(os.path.join(os.environ["DATA_DIR"], "digits.npz"))
model = keras.Sequential(
    [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10, activation="softmax")]
)
model.compile(keras.optimizers.SGD(float(os.environ["LR"])), "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(
    data["x_train"],
    data["y_train"],
    epochs=int(os.environ.get("EPOCHS", "6")),
    batch_size=32,
    verbose=2,
    callbacks=[
        keras.callbacks.TensorBoard(log_dir=os.environ["TENSORBOARD_DIR"], histogram_freq=1),
        keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: time.sleep(0.3)),
    ],
)
loss, accuracy = model.evaluate(data["x_test"], data["y_test"], verbose=0)
with open(os.path.join(os.environ["JOB_DIR"], "result.json"), "w") as f:
    json.dump({"test_accuracy": float(accuracy), "test_loss": float(loss)}, f)
