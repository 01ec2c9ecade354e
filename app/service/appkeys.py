"""Typed keys for what the app object carries (aiohttp AppKey), shared by the app factory and the routes."""
from __future__ import annotations

from aiohttp import web

CONFIG = web.AppKey("config", object)
METRICS = web.AppKey("metrics", object)
EVENTS = web.AppKey("events", object)
STORE = web.AppKey("store", object)
SCHEDULER = web.AppKey("scheduler", object)
