"""The REST API: `create_app()` builds the Flask app; importing this package does nothing else."""

from __future__ import annotations

from typing import Any

from flask import Flask

from jobs.settings import Settings

MAX_BODY_BYTES = 1 << 20
"""Largest JSON request body the API reads (dataset uploads get their own limit)."""


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """The Flask app; `config` may carry SETTINGS (a Settings) and REDIS (a client) for tests."""
    app = Flask(__name__)
    from api.finite import FiniteJSONProvider

    app.json = FiniteJSONProvider(app)  # answers hold no NaN or Infinity
    app.url_map.merge_slashes = False  # `files//etc/passwd` is no file of a job (404), not a redirect to one
    app.config.update(MAX_CONTENT_LENGTH=MAX_BODY_BYTES, JSON_SORT_KEYS=False)
    if config:
        app.config.update(config)
    settings: Settings = app.config.get("SETTINGS") or Settings.from_env()
    app.extensions["gpudeck.settings"] = settings
    from api.longpoll import THREADS, Slots

    threads = app.config.get("API_THREADS", THREADS)
    redis = app.config.get("REDIS")
    if redis is None:
        from redis import Redis

        # Connecting is lazy: nothing talks to Redis until the first request. A connection for every server
        # thread (redis-py's pool holds 100 unless told): a long poll keeps one while it blocks on its stream.
        redis = Redis.from_url(
            settings.redis_url or "redis://127.0.0.1:6379/0", socket_timeout=30, max_connections=threads + 8
        )
    app.extensions["gpudeck.redis"] = redis
    app.extensions["gpudeck.longpolls"] = Slots(threads)

    from api import (
        auth,
        catalog,
        cluster,
        compare,
        datasets,
        errors,
        files,
        health,
        jobs,
        openapi,
        schedules,
        sources,
        tensorboard,
        users,
    )

    errors.register(app)
    auth.register(app)
    app.register_blueprint(health.bp)
    app.register_blueprint(openapi.bp)
    app.register_blueprint(jobs.bp, url_prefix="/api/v1/jobs")
    app.register_blueprint(files.bp, url_prefix="/api/v1/jobs")
    app.register_blueprint(catalog.bp, url_prefix="/api/v1")
    app.register_blueprint(compare.bp, url_prefix="/api/v1")
    app.register_blueprint(cluster.bp, url_prefix="/api/v1")
    app.register_blueprint(datasets.bp, url_prefix="/api/v1")
    app.register_blueprint(sources.bp, url_prefix="/api/v1")
    app.register_blueprint(tensorboard.bp, url_prefix="/api/v1")
    app.register_blueprint(users.bp, url_prefix="/api/v1")
    app.register_blueprint(schedules.bp, url_prefix="/api/v1")
    auth.register_audit(app)
    if app.config.get("START_REAPER") and settings.redis_url:
        from jobs import control
        from jobs.cronjobs import Timetable
        from jobs.notify import Notifier
        from jobs.reaper import Reaper
        from jobs.tensorboard import Sweeper

        retention = (lambda r: control.apply_retention(r, settings)) if settings.retention else None
        Reaper(settings.redis_url, retention).start()  # lost jobs are found even when every worker is gone
        Sweeper(settings.redis_url, settings).start()  # idle TensorBoards are stopped
        Notifier(settings).start()  # notifications are sent even when every worker is gone
        Timetable(settings).start()  # schedules fire even when every worker is gone (their jobs wait in line)
        if settings.mlflow_uri:
            from jobs.export import Exporter

            Exporter(settings).start()  # ended jobs exported to the operator's MLflow (only the API does)
    return app
