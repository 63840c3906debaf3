"""The REST client the CLI and the TUI share."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import requests


def cause(exc: BaseException) -> str:
    """What went wrong under a requests error, in a few words (`connection refused`, `timed out`, `name or service
    not known`), not urllib3's nested repr of its pool and retries."""
    if isinstance(exc, requests.Timeout):
        return "timed out"
    found = re.findall(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
    if found:
        return found[-1].strip().rstrip(".").lower()
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


class ApiError(Exception):
    """The API answered with an error (status, code, message, details)."""

    def __init__(self, status: int, code: str, message: str, details: dict | None = None):
        super().__init__(f"{message} ({code}, HTTP {status})")
        self.status, self.code, self.message, self.details = status, code, message, details or {}


class Unreachable(Exception):
    """The API did not answer at all."""


class Client:
    """Thin wrapper over /api/v1 with the one error shape turned into ApiError."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self._pages: dict[tuple, tuple[str, dict[str, Any]]] = {}  # list pages by query: (ETag, the page)

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = f"{self.base_url}{path}"
        try:
            resp = self.session.request(method, url, timeout=kwargs.pop("timeout", self.timeout), **kwargs)
        except requests.RequestException as exc:
            raise Unreachable(f"cannot reach the gpudeck API at {self.base_url}: {cause(exc)}") from None
        if resp.status_code >= 400:
            try:
                err = resp.json()
                raise ApiError(resp.status_code, err.get("error", "error"), err.get("message", ""), err.get("details"))
            except ValueError:
                raise ApiError(resp.status_code, "error", resp.text[:500]) from None
        return resp

    def submit(self, spec: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self.request("POST", "/api/v1/jobs", json=spec, headers=headers).json()

    def jobs(
        self,
        limit: int = 50,
        cursor: int | None = None,
        status: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        owner: str | None = None,
        q: str | None = None,
    ) -> dict[str, Any]:
        params = {"limit": limit, "cursor": cursor, "status": status, "model": model, "tag": tag, "owner": owner}
        params["q"] = q
        params = {k: v for k, v in params.items() if v}
        key = tuple(sorted(params.items()))
        etag, page = self._pages.get(key, (None, None))
        resp = self.request("GET", "/api/v1/jobs", params=params, headers={"If-None-Match": etag} if etag else {})
        if resp.status_code == 304 and page is not None:
            return page  # unchanged since this client read it: nothing to parse
        page = resp.json()
        if resp.headers.get("ETag"):
            if len(self._pages) >= 64:
                self._pages.clear()
            self._pages[key] = (resp.headers["ETag"], page)
        return page

    def job(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_id}").json()

    def wait(self, job_id: int, timeout: int = 60) -> dict[str, Any]:
        """The job once it has ended, or as it is after `timeout` seconds."""
        resp = self.request("GET", f"/api/v1/jobs/{job_id}/wait", params={"timeout": timeout}, timeout=timeout + 30)
        return resp.json()

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/jobs/{job_id}/cancel").json()

    def set_priority(self, job_id: int, priority: str) -> dict[str, Any]:
        return self.request("PATCH", f"/api/v1/jobs/{job_id}", json={"priority": priority}).json()

    def move(self, job_id: int, **where: Any) -> dict[str, Any]:
        """`before=ID`, `after=ID` or `top=True`."""
        return self.request("POST", f"/api/v1/jobs/{job_id}/move", json=where).json()

    def share(self) -> dict[str, Any]:
        return self.request("GET", "/api/v1/share").json()

    def usage(self, **args: str | None) -> dict[str, Any]:
        """The accounts (since, until, by, period: as GET /api/v1/usage takes them; None: its default)."""
        return self.request("GET", "/api/v1/usage", params={k: v for k, v in args.items() if v}).json()

    def delete(self, job_id: int) -> dict[str, Any]:
        return self.request("DELETE", f"/api/v1/jobs/{job_id}").json()

    def delete_dataset(self, name: str, version: str) -> dict[str, Any]:
        return self.request("DELETE", f"/api/v1/datasets/{quote(name, safe='')}/{quote(version, safe='')}").json()

    def retry(self, job_id: int, resume: bool = True) -> dict[str, Any]:
        body = None if resume else {"resume": False}
        return self.request("POST", f"/api/v1/jobs/{job_id}/retry", json=body).json()

    def sweep(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "/api/v1/sweeps", json=body).json()

    def notifications(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_id}/notifications").json()

    def sweep_summary(self, sweep_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/sweeps/{sweep_id}").json()

    def sweeps(self, limit: int = 50) -> list[dict[str, Any]]:
        return self.request("GET", "/api/v1/sweeps", params={"limit": limit}).json()["sweeps"]

    def stop_sweep(self, sweep_id: int) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/sweeps/{sweep_id}/stop").json()

    def create_schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "/api/v1/schedules", json=body).json()

    def schedules(self) -> list[dict[str, Any]]:
        return self.request("GET", "/api/v1/schedules").json()["schedules"]

    def schedule(self, name: str, action: str | None = None) -> dict[str, Any]:
        """A schedule (GET), or the schedule after `action` (pause, resume: POST)."""
        if action is None:
            return self.request("GET", f"/api/v1/schedules/{quote(name, safe='')}").json()
        return self.request("POST", f"/api/v1/schedules/{quote(name, safe='')}/{action}").json()

    def delete_schedule(self, name: str) -> None:
        self.request("DELETE", f"/api/v1/schedules/{quote(name, safe='')}")

    def cordon(self, host: str, gpu: str, reason: str | None = None) -> dict[str, Any]:
        body = {"reason": reason} if reason else {}
        return self.request("POST", f"/api/v1/gpus/{host}/{gpu}/cordon", json=body).json()

    def uncordon(self, host: str, gpu: str) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/gpus/{host}/{gpu}/uncordon").json()

    def drain(self, worker: str) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/workers/{worker}/drain").json()

    def logs(self, job_id: int, offset: int = 0, live: bool = False) -> tuple[str, int]:
        """Log lines after `offset` and the offset to resume from; `live`: the text may end with the line the
        job is drawing, after a "\r" (split_live)."""
        params = {"offset": offset, **({"live": 1} if live else {})}
        resp = self.request("GET", f"/api/v1/jobs/{job_id}/logs", params=params)
        return resp.text, int(resp.headers.get("X-Next-Offset", offset))

    def follow_logs(self, job_id: int, offset: int = 0, on_live: Callable[[str], None] | None = None) -> Iterator[str]:
        """Every log line after `offset` as it is written, until the job ends; a dropped stream is resumed
        from the lines already received, so none is repeated or lost. `on_live` is given the line the job is
        drawing (a progress bar before its newline) each time it changes."""
        while True:
            params = {"offset": offset, "follow": 1, **({"live": 1} if on_live else {})}
            resp = self.request("GET", f"/api/v1/jobs/{job_id}/logs", params=params, stream=True, timeout=None)
            resp.encoding = "utf-8"
            pending = ""
            try:
                # Split on "\n" only: the server counts lines that way. A stored line has no "\r": one in the
                # stream ends the live line before it (what follows replaces it).
                for chunk in resp.iter_content(chunk_size=None, decode_unicode=True):
                    *lines, pending = (pending + chunk).split("\n")
                    for line in lines:
                        offset += 1
                        yield line[line.rfind("\r") + 1 :]
                    if on_live and "\r" in pending:
                        on_live(pending[pending.rfind("\r") + 1 :])
                return
            except requests.RequestException:
                time.sleep(1.0)  # the API restarted or the connection dropped: resume where we are
            finally:
                resp.close()

    def files(self, job_id: int, prefix: str = "") -> dict[str, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_id}/files", params={"prefix": prefix} if prefix else {}).json()

    def download(self, job_id: int, path: str, dest: str, archive: bool = False, progress=None) -> int:
        """Stream a file (or a folder, as .tar.gz) of a job's dir to `dest`; `progress(done, total)` after each
        chunk. Returns the bytes written. A file already partly at `dest.part` resumes where it broke off."""
        part = f"{dest}.part"
        have = 0 if archive or not os.path.exists(part) else os.path.getsize(part)
        headers = {"Range": f"bytes={have}-"} if have else {}
        url = f"/api/v1/jobs/{job_id}/files/{quote(path)}"
        resp = self.request("GET", url, params={"archive": "tar.gz"} if archive else {}, headers=headers, stream=True)
        if resp.status_code != 206:
            have = 0  # the whole file, from the start
        total = int(resp.headers["Content-Length"]) + have if "Content-Length" in resp.headers else None
        done = have
        with resp, open(part, "ab" if have else "wb") as out:
            for chunk in resp.iter_content(1 << 20):
                out.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
        os.replace(part, dest)
        return done

    def metrics(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_id}/metrics").json()

    def export(self, job_id: int) -> dict[str, Any]:
        """POST /api/v1/jobs/ID/export: the job, its export to the operator's MLflow queued."""
        return self.request("POST", f"/api/v1/jobs/{job_id}/export", json={"target": "mlflow"}).json()

    def compare(self, ids: list[int], metric: str | None = None, x: str = "step", fmt: str = "json") -> Any:
        """GET /api/v1/compare: the comparison (a dict), or its CSV text (`fmt` csv)."""
        params = {"jobs": ",".join(map(str, ids)), "x": x, "format": fmt, **({"metric": metric} if metric else {})}
        resp = self.request("GET", "/api/v1/compare", params=params)
        return resp.text if fmt == "csv" else resp.json()

    def gpus(self) -> dict[str, Any]:
        return self.request("GET", "/api/v1/gpus").json()

    def whoami(self) -> dict[str, Any]:
        return self.request("GET", "/api/v1/whoami").json()

    def audit(self, user: str | None = None, since: str | None = None, limit: int = 100) -> dict[str, Any]:
        params = {k: v for k, v in {"user": user, "since": since, "limit": limit}.items() if v}
        return self.request("GET", "/api/v1/audit", params=params).json()

    def models(self) -> dict[str, Any]:
        return self.request("GET", "/api/v1/models").json()

    def datasets(self) -> dict[str, Any]:
        return self.request("GET", "/api/v1/datasets").json()

    def dataset(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/datasets/{name}").json()

    def upload_dataset(self, name: str, version: str, path: str) -> dict[str, Any]:
        with open(path, "rb") as f:
            files = {"file": (os.path.basename(path), f)}
            return self.request(
                "POST", "/api/v1/datasets", data={"name": name, "version": version}, files=files, timeout=None
            ).json()

    def source(self, ref: str) -> dict[str, Any] | None:
        """A stored source snapshot, or None when the server does not hold it."""
        try:
            return self.request("GET", f"/api/v1/sources/{ref}").json()
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def upload_source(self, path: str, git: dict[str, str] | None = None) -> dict[str, Any]:
        """Upload a source archive (tar in any compression, or zip); the stored snapshot's description."""
        with open(path, "rb") as f:
            files = {"file": (os.path.basename(path), f)}
            return self.request("POST", "/api/v1/sources", data=git or {}, files=files, timeout=None).json()

    def tensorboard(self, job_ids: list[int]) -> dict[str, Any]:
        return self.request("POST", "/api/v1/tensorboard", json={"jobs": job_ids}, timeout=150).json()

    def tensorboards(self) -> dict[str, Any]:
        return self.request("GET", "/api/v1/tensorboard").json()

    def stop_tensorboard(self, port: int) -> None:
        self.request("DELETE", f"/api/v1/tensorboard/{port}")


def split_live(text: str) -> tuple[str, str | None]:
    """A `logs(live=True)` answer as (its lines, the line being drawn or None)."""
    cut = text.rfind("\r")
    return (text, None) if cut < 0 else (text[:cut], text[cut + 1 :])
