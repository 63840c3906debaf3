"""Helpers the tests share (data writers, a live stack, baselines); no test module imports another."""
