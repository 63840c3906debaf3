"""rq-dashboard as a WSGI app for the API benchmark's baseline (served by the same gunicorn settings as gpudeck)."""

import os

from rq_dashboard.cli import make_flask_app

app = make_flask_app(None, None, None, "")
app.config["RQ_DASHBOARD_REDIS_URL"] = (os.environ["REDIS_URL"],)  # one instance: a tuple of URLs
