# One image for every gpudeck service (api, worker, tensorboard); TF_EXTRA=gpu builds the CUDA TensorFlow.
FROM python:3.11-slim
ARG TF_EXTRA=gpu
WORKDIR /opt/gpudeck
COPY pyproject.toml README.md ./
COPY api ./api
COPY jobs ./jobs
COPY models ./models
COPY tui ./tui
# bubblewrap: each job in a sandbox of its own (the worker container needs seccomp=unconfined for namespaces)
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir ".[${TF_EXTRA}]"
ENV GPUDECK_HOME=/data/gpudeck
ENTRYPOINT ["gpudeck"]
