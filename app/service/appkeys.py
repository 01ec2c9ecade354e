"""Typed keys for what the app object carries (aiohttp AppKey), shared by the app factory and the routes."""
from __future__ import annotations

from aiohttp import web

from app.service.config import ServiceConfig
from app.service.dialects.whole import Joins
from app.service.http.events import EventBus
from app.service.http.metrics import Metrics
from app.service.http.request_log import RequestLog
from app.service.scheduling.door import ServiceHost
from app.service.store.proxy import AsyncStore

CONFIG = web.AppKey("config", ServiceConfig)
METRICS = web.AppKey("metrics", Metrics)
REQUESTS = web.AppKey("requests", RequestLog)
EVENTS = web.AppKey("events", EventBus)
STORE = web.AppKey("store", AsyncStore)
SCHEDULER = web.AppKey("scheduler", ServiceHost)    # the model scheduler, through its typed door
JOINS = web.AppKey("joins", Joins)                # abandoned non-streamed requests a resend may take over
