"""``MlflowSink``: one MLflow run as a place to send metric batches, tags and artifacts, failing fast.

Against a tracking server the batches go straight to ``/api/2.0/mlflow/runs/log-batch`` with no retries and a short
timeout, so an unreachable server costs the background thread seconds, not MLflow's minutes of back-off; the caller
keeps the batch and retries later. The requests reuse one keep-alive connection with MLflow's request headers and
credentials (basic or bearer, TLS options) resolved once: MLflow's ``http_request`` resolves its header providers on
every call, which costs the logging thread milliseconds of GIL per request. Credentials that need MLflow's own
machinery (AWS SigV4, auth plugins, the Databricks SDK) go through ``http_request``. Local stores (``sqlite:``,
``file:``) go through ``MlflowClient``.
Every batch respects ``log_batch``'s limits (1000 metrics, 100 tags, 1000 entities per request).
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

__all__ = ["MlflowSink", "MAX_METRICS_PER_BATCH", "MAX_TAGS_PER_BATCH", "run_id_of"]

MAX_METRICS_PER_BATCH = 1000
MAX_TAGS_PER_BATCH = 100
MAX_TAG_VALUE = 8000
MAX_PARAM_VALUE = 6000
MAX_PARAMS_PER_BATCH = 100
_TIMEOUT_S = 5.0


def run_id_of(run: Any) -> str:
    """The id of an MLflow ``Run``, ``ActiveRun`` or run-id string.

    Raises:
        ValueError: ``run`` is none of these.
    """
    if isinstance(run, str) and run:
        return run
    info = getattr(run, "info", None)
    if info is not None and getattr(info, "run_id", None):
        return str(info.run_id)
    raise ValueError(f"mlflow_run={run!r}: expected an MLflow Run, ActiveRun or run id")


class MlflowSink:
    """Sends metrics, tags and artifacts to one MLflow run.

    Args:
        run_id: the run.
        tracking_uri: the tracking URI (default: MLflow's current one).
    """

    def __init__(self, run_id: str, tracking_uri: str | None = None) -> None:
        import mlflow

        self.run_id = run_id
        self.tracking_uri = tracking_uri or mlflow.get_tracking_uri()
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        self._rest = self.tracking_uri.startswith(("http://", "https://"))
        self._session: Any = None  # built at the first request
        self._host = ""
        self._mlflow_path = False  # the credentials need MLflow's own request path

    def log(self, metrics: Sequence[Metric] = (), tags: Mapping[str, str] | None = None) -> None:
        """Send metrics and tags in as many requests as the limits need; raises on the first failure."""
        tag_items = [(k, str(v)[:MAX_TAG_VALUE]) for k, v in (tags or {}).items()]
        for i in range(0, max(len(tag_items), 1), MAX_TAGS_PER_BATCH):
            chunk = tag_items[i : i + MAX_TAGS_PER_BATCH]
            if chunk:
                self._batch([], [RunTag(k, v) for k, v in chunk])
        for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            self._batch(list(metrics[i : i + MAX_METRICS_PER_BATCH]), [])

    def log_params(self, params: Mapping[str, str]) -> dict[str, str]:
        """Log the params the run does not hold yet and return them; raises on the first failure.

        MLflow params are immutable: a key the run holds, with whatever value, is left as it is.
        """
        have = self._run_params()
        new = {k: str(v)[:MAX_PARAM_VALUE] for k, v in params.items() if k not in have}
        items = [Param(k, v) for k, v in new.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self._batch([], [], items[i : i + MAX_PARAMS_PER_BATCH])
        return new

    def _run_params(self) -> dict[str, str]:
        """The run's params (one request, no retries)."""
        if not self._rest:
            return dict(self.client.get_run(self.run_id).data.params)
        from mlflow.utils.rest_utils import http_request, verify_rest_response

        endpoint = "/api/2.0/mlflow/runs/get"
        resp = http_request(
            self._creds(), endpoint, "GET", max_retries=0, timeout=_TIMEOUT_S, params={"run_id": self.run_id}
        )
        verify_rest_response(resp, endpoint)
        return {p["key"]: p["value"] for p in resp.json()["run"]["data"].get("params", [])}

    def _batch(self, metrics: list[Metric], tags: list[RunTag], params: Sequence[Param] = ()) -> None:
        if not self._rest:
            extra = {"params": list(params)} if params else {}
            self.client.log_batch(self.run_id, metrics=metrics, tags=tags, synchronous=True, **extra)
            return
        from mlflow.utils.rest_utils import http_request, verify_rest_response

        body = {
            "run_id": self.run_id,
            "metrics": [{"key": m.key, "value": m.value, "timestamp": m.timestamp, "step": m.step} for m in metrics],
            "tags": [{"key": t.key, "value": t.value} for t in tags],
            "params": [{"key": p.key, "value": p.value} for p in params],
        }
        endpoint = "/api/2.0/mlflow/runs/log-batch"
        session = self._direct_session()
        if session is None:
            resp = http_request(self._creds(), endpoint, "POST", max_retries=0, timeout=_TIMEOUT_S, json=body)
        else:
            resp = self._post(session, endpoint, body)
        verify_rest_response(resp, endpoint)

    def _creds(self) -> Any:
        return self.client._tracking_client.store.get_host_creds()

    def _direct_session(self) -> Any:
        """A ``requests.Session`` with MLflow's headers and credentials, or None when MLflow's path is needed."""
        if self._mlflow_path or self._session is not None:
            return self._session
        import requests
        from mlflow.tracking.request_header.registry import resolve_request_headers

        creds = self._creds()
        if (
            creds.aws_sigv4
            or creds.auth
            or creds.use_databricks_sdk
            or getattr(creds, "client_secret", None)
            or _request_workspace()
        ):
            self._mlflow_path = True
            return None
        session = requests.Session()
        session.headers.update(resolve_request_headers())
        if creds.username and creds.password:
            pair = f"{creds.username}:{creds.password}".encode()
            session.headers["Authorization"] = "Basic " + base64.standard_b64encode(pair).decode()
        elif creds.token:
            session.headers["Authorization"] = f"Bearer {creds.token}"
        session.verify = creds.verify
        if creds.client_cert_path is not None:
            session.cert = creds.client_cert_path
        if getattr(creds, "workspace_id", None):
            session.headers["x-databricks-org-id"] = creds.workspace_id
        session.headers["Content-Type"] = "application/json"
        self._host = creds.host.rstrip("/")
        # proxies, CA bundle and netrc from the environment, read once instead of on every request
        settings = session.merge_environment_settings(self._host, {}, None, session.verify, session.cert)
        session.proxies, session.verify, session.cert = settings["proxies"], settings["verify"], settings["cert"]
        session.trust_env = False
        self._session = session
        return session

    def _post(self, session: Any, endpoint: str, body: dict[str, Any]) -> Any:
        import requests
        from mlflow.exceptions import MlflowException

        data = json.dumps(body, separators=(",", ":"), allow_nan=True)
        url = self._host + endpoint
        try:
            try:
                return session.post(url, data=data, timeout=_TIMEOUT_S)
            except requests.exceptions.ConnectionError:
                # servers close idle keep-alive connections (uvicorn after 5 s): one retry on a fresh connection
                session.close()
                return session.post(url, data=data, timeout=_TIMEOUT_S)
        except Exception as exc:  # same failure type as MLflow's http_request, so callers handle one kind
            session.close()  # a broken keep-alive connection is not reused
            raise MlflowException(f"API request to {url} failed with exception {exc}") from exc

    def reachable(self) -> bool:
        """Whether the tracking server answers now (always True for local stores)."""
        if not self._rest:
            return True
        from mlflow.utils.rest_utils import http_request

        try:
            return http_request(self._creds(), "/health", "GET", max_retries=0, timeout=_TIMEOUT_S).status_code == 200
        except Exception:
            return False

    def check_answers(self) -> None:
        """Fail fast, in one line, when the tracking server does not answer (local stores always do).

        One request without retries and with a short timeout: MLflow's own client retries a dead server with
        back-off for minutes. Any HTTP answer counts (a server without ``/health`` answers 404).

        Raises:
            ConnectionError: nothing answers at the tracking URI within a few seconds.
        """
        if not self._rest:
            return
        from mlflow.utils.rest_utils import http_request

        try:
            http_request(self._creds(), "/health", "GET", max_retries=0, timeout=_TIMEOUT_S)
        except Exception as exc:
            raise ConnectionError(
                f"the MLflow tracking server at {self.tracking_uri} does not answer ({_why_no_answer(exc)})"
            ) from None

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Upload one file."""
        self.client.log_artifact(self.run_id, os.fspath(path), artifact_path)

    def log_artifacts(self, directory: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Upload a directory tree."""
        self.client.log_artifacts(self.run_id, os.fspath(directory), artifact_path)

    def end(self, status: str = "FINISHED") -> None:
        """Mark the run terminated."""
        self.client.set_terminated(self.run_id, status)


def _why_no_answer(exc: Exception) -> str:
    """A few words for a failed request (requests' messages run to several hundred characters)."""
    text = str(exc)
    if "refused" in text.lower():
        return "connection refused"
    if "timed out" in text.lower() or "timeout" in text.lower():
        return f"no answer within {_TIMEOUT_S:g} s"
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:120]


def _request_workspace() -> str | None:
    """MLflow's per-request workspace (newer MLflow versions), which only ``http_request`` knows how to send."""
    try:
        from mlflow.utils.workspace_context import get_request_workspace
    except ImportError:
        return None
    return get_request_workspace()


def metrics_of(values: Mapping[str, float], step: int, timestamp_ms: int | None = None) -> list[Metric]:
    """``Metric`` entities of one step."""
    ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
    return [Metric(k, float(v), ts, int(step)) for k, v in values.items()]


def flatten(groups: Iterable[list[Metric]]) -> list[Metric]:
    """One list from several."""
    return [m for g in groups for m in g]
