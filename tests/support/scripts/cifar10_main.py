"""Stands in for Kibernetika's cifar10_main.py: prints the options it was given and what its task is."""

import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("--num-gpus", type=int, required=True)
parser.add_argument("--train-steps", type=int, required=True)
parser.add_argument("--data-dir", required=True)
parser.add_argument("--job-dir", required=True)
args = parser.parse_args()
os.makedirs(args.job_dir, exist_ok=True)
task = {k: os.environ.get(k) for k in ("TF_CONFIG", "GPUDECK_TASK_TYPE", "GPUDECK_TASK_INDEX")}
print("cifar10_main " + json.dumps({**vars(args), **task, "files": sorted(os.listdir(args.data_dir))}), flush=True)
