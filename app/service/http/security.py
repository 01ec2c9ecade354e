"""Middlewares that protect a service bound to loopback from the browser, and turn every failure into JSON.

- DNS rebinding: a page on evil.example whose name resolves to 127.0.0.1 sends `Host: evil.example`. We answer
  only Host headers that name this server (localhost, an IP literal, this machine's name, the bind host, or a
  host in STRATA_ORIGINS).
- Cross-origin: browsers send `Origin`. Only localhost origins, the app's own and STRATA_ORIGINS may call us;
  others get 403 (CORS headers alone would still let the request run: a POST with a simple content type is
  sent without a preflight).
- Optional bearer token (STRATA_API_KEY) on everything but /api/version and CORS preflights.
- Errors: ApiError, aiohttp's HTTP exceptions (413 body too large, 405, 404 route) and anything unexpected all
  become a JSON body in the route's dialect; an unexpected exception is a 500 that is logged with its traceback.
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
import re
import socket
from urllib.parse import urlsplit

from aiohttp import web

from .. import appkeys as keys
from ..config import ServiceConfig
from .errors import ApiError, error_body

log = logging.getLogger("strata.service")

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}
# The desktop app's own origins. Not "null": sandboxed iframes on any web site send Origin: null.
APP_ORIGINS = {"app://strata", "strata://app"}
CORS_HEADERS = "Authorization, Content-Type, User-Agent, Accept, X-Requested-With, OpenAI-Beta, X-Stainless-Lang"
OPEN_PATHS = {"/api/version"}       # as documented: everything else needs STRATA_API_KEY when it is set
CORS_KEY = web.RequestKey("cors_headers", dict)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


# host or [IPv6], then an optional :port (":*" only appears in STRATA_ORIGINS patterns). Strict on purpose:
# urlsplit() is lenient ("[::1].evil.example" gives hostname "::1"), and a Host/Origin it would misread must
# be refused, not mapped to loopback.
_NETLOC = re.compile(r"^(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::(?:\d{1,5}|\*))?$")


def _host_of(netloc: str) -> str:
    """'example.com:8080' -> 'example.com'; '[::1]:80' -> '::1'; anything malformed -> ''."""
    m = _NETLOC.match(netloc.strip().lower())
    if not m:
        return ""
    return m.group("v6") or m.group("name")


def _is_local(host: str) -> bool:
    return host in LOCAL_NAMES or host.endswith(".localhost")


class Guard:
    """The allow-lists, computed once per app from the config."""

    def __init__(self, config: ServiceConfig):
        self.config = config
        self.extra_origins = {o.lower() for o in config.origins}
        self.allow_any_origin = "*" in self.extra_origins
        names = {config.host.lower()}
        try:   # this machine's own names, for a service bound to the LAN (STRATA_HOST=0.0.0.0)
            host = socket.gethostname().lower()
            names |= {host, f"{host}.local", socket.getfqdn().lower()}
        except OSError:
            pass
        for o in self.extra_origins:
            h = _host_of(urlsplit(o).netloc) if "://" in o else _host_of(o)
            if h:
                names.add(h)
        self.host_names = names

    def host_allowed(self, host_header: str | None) -> bool:
        if not host_header:           # HTTP/1.0 without Host: not a browser
            return True
        host = _host_of(host_header)
        if not host:
            return False
        return _is_local(host) or _is_ip(host) or host in self.host_names

    def origin_allowed(self, origin: str) -> bool:
        o = origin.strip().lower().rstrip("/")
        if o in APP_ORIGINS or self.allow_any_origin or o in self.extra_origins:
            return True
        parts = urlsplit(o)
        if parts.scheme in ("http", "https"):
            host = _host_of(parts.netloc)
            if _is_local(host):
                return True
            # STRATA_ORIGINS may name "http://host:*" to allow any port on that host
            if f"{parts.scheme}://{host}:*" in self.extra_origins:
                return True
        return False


def make_middlewares(config: ServiceConfig) -> list:
    """[errors, security]: errors outermost, so a refusal by the security middleware is JSON too."""
    return [_errors_middleware, _security_middleware(Guard(config), config.api_key)]


@web.middleware
async def _errors_middleware(request: web.Request, handler):
    resp = await _errors_as_json(request, handler)
    cors = request.get(CORS_KEY)
    if cors and not resp.prepared:      # an allowed page must be able to read the error too
        resp.headers.update(cors)
    return resp


async def _errors_as_json(request: web.Request, handler):
    try:
        return await handler(request)
    except ApiError as e:
        return web.json_response(error_body(request, e), status=e.status, headers=e.headers)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        msg = _http_message(e, request)
        err = ApiError(e.status, msg)
        headers = {k: v for k, v in e.headers.items() if k.lower() in ("allow", "retry-after", "www-authenticate")}
        return web.json_response(error_body(request, err), status=e.status, headers=headers)
    except (ConnectionResetError, web.RequestPayloadError) as e:   # client went away / sent garbage mid-body
        err = ApiError(400, f"could not read the request body: {e}")
        return web.json_response(error_body(request, err), status=400)
    except Exception as e:  # a bug on our side: say so, keep serving
        log.exception("unhandled error on %s %s", request.method, request.path)
        err = ApiError(500, f"internal error: {type(e).__name__}: {e}")
        return web.json_response(error_body(request, err), status=500)


def _security_middleware(guard: Guard, api_key: str | None):
    @web.middleware
    async def security_middleware(request: web.Request, handler):
        if not guard.host_allowed(request.headers.get("Host")):
            raise ApiError(403, "Host header does not name this server (DNS rebinding protection); "
                                "add the name to STRATA_ORIGINS to allow it")
        origin = request.headers.get("Origin")
        cors: dict[str, str] = {}
        if origin is not None:
            if not guard.origin_allowed(origin):
                raise ApiError(403, f"origin {origin!r} is not allowed; set STRATA_ORIGINS to allow it")
            cors = {"Access-Control-Allow-Origin": origin, "Vary": "Origin",
                    "Access-Control-Allow-Credentials": "true"}
        if request.method == "OPTIONS" and origin is not None:   # CORS preflight: no auth, no body
            return web.Response(status=204, headers={
                **cors,
                "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, HEAD, OPTIONS",
                "Access-Control-Allow-Headers": request.headers.get("Access-Control-Request-Headers", CORS_HEADERS),
                "Access-Control-Max-Age": "600",
            })
        if api_key and request.path not in OPEN_PATHS:
            auth = request.headers.get("Authorization", "")
            token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not token or not hmac.compare_digest(token.encode(), api_key.encode()):
                raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <STRATA_API_KEY>'",
                               code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        if cors:
            request[CORS_KEY] = cors     # streaming handlers add them before prepare()
        resp = await handler(request)
        if cors and not resp.prepared:
            resp.headers.update(cors)
        return resp

    return security_middleware


def _http_message(e: web.HTTPException, request: web.Request) -> str:
    if e.status == 413:
        return f"request body too large (limit {request.app[keys.CONFIG].max_body} bytes)"
    if e.status == 404:
        return f"no such endpoint: {request.method} {request.path}"
    if e.status == 405:
        return f"method {request.method} not allowed on {request.path}"
    return e.text or e.reason


def apply_cors(request: web.Request, resp: web.StreamResponse) -> None:
    """Streaming handlers call this before prepare(): the middleware cannot touch headers already sent."""
    cors = request.get(CORS_KEY)
    if cors:
        resp.headers.update(cors)
