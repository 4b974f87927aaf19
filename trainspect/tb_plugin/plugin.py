"""The trainspect TensorBoard plugin: a Profiler tab and a Rules tab over the runs of the log directory.

Each route handler parses its request and calls an ``_*_impl`` method that returns plain data; errors are
TensorBoard's ``NotFoundError`` / ``InvalidArgumentError`` and come back as JSON ``{"error": ...}`` with
status 404 / 400. Routes are documented in docs/http_api.md.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tensorboard import errors, plugin_util
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from trainspect.store.safe_files import TRACE_CAP, read_capped
from trainspect.tb_plugin import metadata
from trainspect.tb_plugin.cards import Card, CardRegistry, default_cards
from trainspect.tb_plugin.profiler_view import overview
from trainspect.tb_plugin.rules_view import run_summary, verdict_detail, verdict_rows
from trainspect.tb_plugin.run_data import RunData
from trainspect.tb_plugin.runs import RunIndex, RunInfo
from trainspect.tb_plugin.traces import find_trace, list_traces

__all__ = ["TrainspectPlugin"]

logger = logging.getLogger(__name__)

_STATIC_DIR = Path(__file__).parent / "static"
_ECHARTS = Path(__file__).parent.parent / "_vendor" / "echarts.min.js"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}
_JSON = "application/json"
_Handler = Callable[[wrappers.Request], wrappers.Response]
_WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class TrainspectPlugin(base_plugin.TBPlugin):
    """Profiler and Rules views of trainspect run directories.

    Args:
        context: TensorBoard's ``TBContext`` (``logdir`` and ``data_provider`` are used).
        cards: the Profiler tab's cards, each served at ``/<id>`` (default: :func:`~trainspect.tb_plugin.cards.
            default_cards`, the built-in ones and the ``trainspect.tb_cards`` plugins).

    Example:
        >>> import tempfile
        >>> plugin = TrainspectPlugin(base_plugin.TBContext(logdir=tempfile.mkdtemp()))
        >>> plugin.is_active(), sorted(plugin.get_plugin_apps())[:3]
        (False, ['/cards', '/cuda_memory', '/dataloader'])
    """

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext, cards: CardRegistry | None = None) -> None:
        self._cards = default_cards() if cards is None else cards
        self._provider = context.data_provider
        self._index = RunIndex(context.logdir or "")
        self._data: dict[str, RunData] = {}
        self._data_lock = threading.Lock()
        self._overviews: dict[str, tuple[tuple[object, ...], dict[str, Any]]] = {}
        self._provider_runs: frozenset[str] = frozenset()
        self._provider_at = float("-inf")
        self._static = {p.name: p for p in _STATIC_DIR.iterdir() if p.is_file()} if _STATIC_DIR.is_dir() else {}

    # --- TBPlugin -----------------------------------------------------------------------------------
    def get_plugin_apps(self) -> dict[str, _WSGIApp]:
        """The route table (paths below ``/data/plugin/trainspect``)."""
        routes: dict[str, _Handler] = {
            "/index.js": self._serve_index,
            "/static/*": self._serve_static,
            "/vendor/echarts.min.js": self._serve_echarts,
            "/runs": self._serve_runs,
            "/profiler": self._serve_profiler,
            "/rules": self._serve_rules,
            "/rule": self._serve_rule,
            "/trace": self._serve_trace,
            "/cards": self._serve_cards,
        }
        for card in self._cards.cards():
            routes["/" + card.id] = self._card_handler(card)
        return {route: _wsgi(handler) for route, handler in routes.items()}

    def is_active(self) -> bool:
        """Whether a run directory under the log directory holds trainspect data (cached, a few ms)."""
        return self._index.is_active()

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        """An ES module loaded in an iframe; TensorBoard calls its exported ``render()``."""
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=metadata.TAB_NAME)

    def data_plugin_names(self) -> tuple[str, ...]:
        """None: the plugin reads the run directories, not TensorBoard summaries."""
        return ()

    # --- static files -------------------------------------------------------------------------------
    def _file(self, request: wrappers.Request, path: Path | None, expires: int = 0) -> wrappers.Response:
        if path is None or not path.is_file():
            return _error(request, errors.NotFoundError("no such file"))
        ctype = _TYPES.get(path.suffix, "application/octet-stream")
        return http_util.Respond(request, path.read_bytes(), ctype, expires=expires)

    def _serve_index(self, request: wrappers.Request) -> wrappers.Response:
        return self._file(request, self._static.get("index.js"))

    def _serve_static(self, request: wrappers.Request) -> wrappers.Response:
        # Only names listed from the static folder are served: "../", "%2e%2e%2f" and absolute paths miss.
        name = request.path.split("/static/", 1)[-1]
        return self._file(request, self._static.get(name))

    def _serve_echarts(self, request: wrappers.Request) -> wrappers.Response:
        return self._file(request, _ECHARTS, expires=3600)

    # --- JSON routes --------------------------------------------------------------------------------
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        self._refresh_provider_runs(request)
        return _json(request, self._runs_impl)

    def _serve_profiler(self, request: wrappers.Request) -> wrappers.Response:
        return _json(request, lambda: self._profiler_impl(request.args.get("run")))

    def _serve_cards(self, request: wrappers.Request) -> wrappers.Response:
        return _json(request, lambda: {"cards": [c.to_json() for c in self._cards.cards()]})

    def _card_handler(self, card: Card) -> _Handler:
        """The route of one card: typed arguments parsed (400 on a bad one), then the run looked up (404)."""

        def serve(request: wrappers.Request) -> wrappers.Response:
            def impl() -> Any:
                args = card.parse(request.args)
                return card.serve(self._run_data(self._lookup(request.args.get("run"))).profiler(), args)

            return _json(request, impl)

        return serve

    def _serve_rules(self, request: wrappers.Request) -> wrappers.Response:
        return _json(request, self._rules_impl)

    def _serve_rule(self, request: wrappers.Request) -> wrappers.Response:
        return _json(request, lambda: self._rule_impl(request.args.get("run"), request.args.get("rule")))

    def _serve_trace(self, request: wrappers.Request) -> wrappers.Response:
        """A profiled window's Chrome trace as a download (open it in Perfetto or chrome://tracing)."""
        try:
            info = self._lookup(request.args.get("run"))
            path = find_trace(info.path, request.args.get("id"))
            body = read_capped(path, TRACE_CAP)
        except errors.PublicError as exc:
            return _error(request, exc)
        except OSError as exc:
            return _error(request, errors.NotFoundError(f"the trace could not be read ({type(exc).__name__})"))
        except Exception as exc:  # noqa: BLE001 - a JSON 500 with a short message, never a traceback page
            return _internal(request, exc)
        gz = path.name.endswith(".gz")
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{info.name}_{path.parent.name}_{path.name}")
        response = http_util.Respond(request, body, "application/gzip" if gz else _JSON)
        response.headers["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    # --- implementations (plain data in, plain data out) --------------------------------------------
    def _refresh_provider_runs(self, request: wrappers.Request) -> None:
        """Remember the runs TensorBoard's data provider knows (works with the Rust data server too)."""
        if self._provider is None or time.monotonic() - self._provider_at < 1.0:
            return
        try:
            ctx = plugin_util.context(request.environ)
            eid = plugin_util.experiment_id(request.environ)
            runs = self._provider.list_runs(ctx, experiment_id=eid)
            self._provider_runs = frozenset(r.run_name for r in runs)
            self._provider_at = time.monotonic()
        except Exception:  # noqa: BLE001 - a failing provider must not hide the runs found on disk
            self._provider_runs = frozenset()

    def _lookup(self, run: str | None) -> RunInfo:
        return self._index.lookup(run, self._provider_runs)

    def _run_data(self, info: RunInfo) -> RunData:
        with self._data_lock:
            data = self._data.get(info.name)
            if data is None or data.path != info.path:
                data = self._data[info.name] = RunData(info.path)
            return data

    def _runs_impl(self) -> dict[str, Any]:
        runs = dict(self._index.runs())
        for name in self._provider_runs - set(runs):
            try:
                runs[name] = self._lookup(name)
            except errors.PublicError:
                continue
        listed = [runs[n].to_json() for n in sorted(runs)]
        return {"version": metadata.PROTOCOL_VERSION, "runs": listed}

    def _profiler_impl(self, run: str | None) -> dict[str, Any]:
        info = self._lookup(run)
        data = self._run_data(info)
        verdicts, _err = data.verdicts()
        profile = data.profiler()
        key = data.version(profile)
        cached = self._overviews.get(info.name)
        if cached is not None and cached[0] == key:  # a live view polls: recompute only when data changed
            return cached[1]
        out = overview(profile, verdicts, data.problems)
        out["run"] = info.name
        out["traces"] = list_traces(info.path)
        self._overviews[info.name] = (key, out)
        return out

    def _rules_impl(self) -> dict[str, Any]:
        rows: list[dict[str, Any]] = []
        problems = []
        summaries = []
        runs = self._index.runs()
        for name in sorted(runs):  # the verdict file is checked on every call: a running job creates it late
            verdicts, err = self._run_data(runs[name]).verdicts()
            if err:
                problems.append({"run": name, "error": err})
            rows.extend(verdict_rows(name, verdicts))
            summaries.append(run_summary(name, verdicts, runs[name].path))
        return {"rows": rows, "problems": problems, "runs": len(runs), "summaries": summaries}

    def _rule_impl(self, run: str | None, rule: str | None) -> dict[str, Any]:
        info = self._lookup(run)
        verdicts, err = self._run_data(info).verdicts()
        if err:
            raise errors.NotFoundError(err)
        return verdict_detail(info.name, verdicts, rule)


def _wsgi(handler: _Handler) -> _WSGIApp:
    """Turn a ``request -> response`` handler into the WSGI app TensorBoard mounts."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = wrappers.Request(environ)
        try:
            response = handler(request)
        except Exception as exc:  # noqa: BLE001 - whatever a route missed is a JSON 500, never a traceback page
            response = _internal(request, exc)
        return response(environ, start_response)  # type: ignore[no-any-return]

    return app


def _error(request: wrappers.Request, exc: errors.PublicError) -> wrappers.Response:
    return http_util.Respond(request, {"error": str(exc)}, _JSON, code=exc.http_code)


def _internal(request: wrappers.Request, exc: Exception) -> wrappers.Response:
    """A JSON 500 with a short message (the traceback goes to TensorBoard's log)."""
    logger.error("trainspect plugin: %s failed", request.path, exc_info=exc)
    body = {"error": f"internal error in the trainspect plugin ({type(exc).__name__}); see TensorBoard's log"}
    return http_util.Respond(request, body, _JSON, code=500)


def _json(request: wrappers.Request, impl: Callable[[], Any]) -> wrappers.Response:
    try:
        body = impl()
    except errors.PublicError as exc:
        return _error(request, exc)
    except Exception as exc:  # noqa: BLE001 - unreadable data must give the view a message, not an HTML 500
        return _internal(request, exc)
    try:  # the views already turned NaN into None; json.dumps is ~4x faster than TensorBoard's Cleanse
        text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return http_util.Respond(request, body, _JSON)
    return http_util.Respond(request, text, _JSON)
