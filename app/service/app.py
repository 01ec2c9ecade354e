"""The aiohttp application: `create_app(config)`. Routes are grouped per surface (Ollama, OpenAI, Strata);
startup discovers devices in the background, cleanup unloads every model (their runner processes end)."""
from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from . import appkeys as keys

from . import collaborators, dialects
from .config import ServiceConfig
from .dialects.ollama import manage_routes as ollama_manage_routes
from .dialects.ollama import transfer_routes as ollama_transfer_routes
from .dialects.rerank import routes as rerank_routes
from .dialects.strata import routes as strata_routes
from .dialects.whole import Joins
from .http.events import EventBus
from .http import request_history, request_log
from .http.metrics import Metrics
from .http.security import make_middlewares
from .scheduling import fair_slots
from .scheduling.scheduler import ModelSettings, Scheduler
from .store.model_store import ModelStore
from .store.proxy import AsyncStore

log = logging.getLogger("strata.service")


async def _open_request_history(config: ServiceConfig, store: AsyncStore, requests) -> None:
    """The request log on disk (http/request_history.py) beside the store's database (the data dir, where the
    prompt cache on disk lives too), unless turned off; when it cannot be opened the log lives in memory only."""
    if not config.request_history:
        return
    try:
        folder = await store.folder()
        history = await asyncio.to_thread(request_history.RequestHistory, folder / request_history.FILE_NAME)
    except Exception as e:  # noqa: BLE001 - a log that cannot be opened must not stop the service
        log.warning("request history not kept: %s", e)
        return
    requests.attach_history(history)


def _default_store(config: ServiceConfig) -> ModelStore:
    return ModelStore(discover_external=config.external_sources)


# nginx's label for "the client closed the connection before the answer was complete": not a server error, so
# an alert on the 5xx rate does not fire on ordinary cancellations (a Stop button, an agent's timeout)
CLIENT_CLOSED_REQUEST = 499


def _metrics_middleware(metrics: Metrics):
    @web.middleware
    async def count(request: web.Request, handler):
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as e:
            status = e.status
            raise
        except (asyncio.CancelledError, ConnectionResetError):
            # aiohttp cancels the handler, or the next write fails, when the peer closed the connection
            status = CLIENT_CLOSED_REQUEST
            raise
        finally:
            route = request.match_info.route
            path = route.resource.canonical if route is not None and route.resource is not None else "unmatched"
            metrics.count_request(path, request.method, status)
    return count


def create_app(config: ServiceConfig | None = None, *, store_factory=None) -> web.Application:
    config = config or ServiceConfig.from_env()
    metrics = Metrics()
    events = EventBus()
    requests = request_log.RequestLog(events, bodies=config.request_bodies)
    # order: request log and metrics (outermost, see the final status) -> errors -> security -> handler
    app = web.Application(client_max_size=config.max_body,
                          middlewares=[request_log.middleware(requests), fair_slots.middleware(),
                                       _metrics_middleware(metrics),
                                       *make_middlewares(config)])
    app.on_response_prepare.append(request_log.on_prepare)
    store = AsyncStore(store_factory or (lambda: _default_store(config)))
    app[keys.CONFIG] = config
    app[keys.METRICS] = metrics
    app[keys.EVENTS] = events
    app[keys.REQUESTS] = requests
    app[keys.STORE] = store
    app[keys.JOINS] = Joins()

    ollama_manage_routes.add_routes(app)
    dialects.add_routes(app)
    strata_routes.add_routes(app)
    ollama_transfer_routes.add_routes(app)
    rerank_routes.add_routes(app)

    async def lifecycle(app: web.Application):
        scheduler = Scheduler(config, events, metrics, collaborators.live(config, store))
        app[keys.SCHEDULER] = scheduler
        try:            # the pins and default keep-alives users set (strata pin, POST /api/pin)
            for name, st in (await store.model_settings()).items():
                scheduler.settings[name] = ModelSettings(**st)
        except Exception as e:  # noqa: BLE001 - an unreadable store fails its own requests with a clear error
            log.warning("model settings: %s", e)
        await _open_request_history(config, store, requests)

        async def discover() -> None:
            try:
                await scheduler.inventory()
            except Exception as e:  # noqa: BLE001 - planning will try again and report it
                log.warning("%s", e)

        task = asyncio.get_running_loop().create_task(discover())
        yield
        task.cancel()
        await app[keys.JOINS].close()           # abandoned non-streamed requests kept for a resend
        await scheduler.close()
        store.close()
        if requests.history is not None:
            await asyncio.get_running_loop().run_in_executor(None, requests.history.close)

    app.cleanup_ctx.append(lifecycle)
    return app
