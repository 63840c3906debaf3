"""Keras model zoo, datasets and the trainer; never imports api, jobs or tui."""
