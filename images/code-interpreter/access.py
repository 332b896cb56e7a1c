"""Who may call the code interpreter server, decided as envd decides.

Every route but GET /health needs the sandbox's envd access token in
X-Access-Token, exactly when envd needs it: the server keeps no token of
its own (a snapshot's server would keep the snapshot's), it asks envd.
Each request's token goes to envd's GET /envs; envd compares it in
constant time with the token the node gave it at /init, which runs again
after every restore with that sandbox's own token. envd's 200 admits the
request (a sandbox created without `secure` has no token, and envd then
admits everyone), its 401 refuses it, and no answer refuses it too (503).
The same answer carries the sandbox's environment variables (for
executions) and envd's init ID, which changes at every /init: a new one
means the sandbox was restored since the last request.

A body must be JSON, and so must any POST: a browser sends a
cross-site form post or a text/plain body without asking, but it asks
(a CORS preflight) before it sends application/json or X-Access-Token.
Preflights are answered for any origin, as envd's are: the token is a
header, never a cookie, so a page can use the server only with a token
it was given.

Standard library only, so that it runs on any Python 3.
"""

import http.client
import json
import urllib.parse
from dataclasses import dataclass, field
from http import HTTPStatus

ACCESS_TOKEN_HEADER = "X-Access-Token"
INIT_ID_HEADER = "X-Warren-Init-Id"
ENVD_TIMEOUT = 10  # seconds

# What a preflight allows, as Warren's CORS policy does for envd.
CORS_METHODS = "GET, POST, DELETE, OPTIONS"
CORS_MAX_AGE = "7200"


class Denied(Exception):
    """A request refused before it reached a route: status and message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Session:
    """What envd answered for an admitted request."""

    envs: dict = field(default_factory=dict)
    init_id: str = ""


class Envd:
    """envd's HTTP API inside the sandbox (http://127.0.0.1:49983)."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 49983

    def admit(self, token):
        """Asks envd whether token (None: the request had none) opens the
        sandbox; returns the Session, or raises Denied."""
        headers = {}
        if token is not None:
            headers[ACCESS_TOKEN_HEADER] = token
        conn = http.client.HTTPConnection(self.host, self.port, timeout=ENVD_TIMEOUT)
        try:
            conn.request("GET", "/envs", headers=headers)
            resp = conn.getresponse()
            body = resp.read(1 << 20)
        except ValueError:  # a header value http.client refuses to send
            raise Denied(HTTPStatus.UNAUTHORIZED, "invalid access token")
        except OSError:
            raise Denied(HTTPStatus.SERVICE_UNAVAILABLE, "the access token cannot be checked now (envd does not answer)")
        finally:
            conn.close()
        if resp.status == HTTPStatus.UNAUTHORIZED:
            raise Denied(HTTPStatus.UNAUTHORIZED, "unauthorized: this sandbox needs its access token in X-Access-Token")
        if resp.status != HTTPStatus.OK:
            raise Denied(HTTPStatus.SERVICE_UNAVAILABLE, f"the access token cannot be checked now (envd answered {resp.status})")
        try:
            envs = json.loads(body or b"{}")
        except ValueError:
            envs = {}
        if not isinstance(envs, dict):
            envs = {}
        return Session({str(k): str(v) for k, v in envs.items()}, resp.getheader(INIT_ID_HEADER) or "")


def is_json(content_type):
    """Reports whether a Content-Type header names application/json
    (parameters such as charset allowed)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json"


def check_body_type(method, headers):
    """Raises Denied (415) for a POST, or any request with a body, whose
    Content-Type is not application/json."""
    try:
        length = int(headers.get("Content-Length") or 0)
    except ValueError:
        raise Denied(HTTPStatus.BAD_REQUEST, "invalid Content-Length")
    has_body = length > 0 or "chunked" in (headers.get("Transfer-Encoding") or "").lower()
    if (method == "POST" or has_body) and not is_json(headers.get("Content-Type")):
        raise Denied(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "Content-Type must be application/json")


def is_preflight(method, headers):
    """Reports whether the request is a browser's CORS preflight."""
    return method == "OPTIONS" and bool(headers.get("Origin")) and bool(headers.get("Access-Control-Request-Method"))


def preflight_headers(headers):
    """The headers of the 204 answering a preflight besides
    cors_headers' (any origin): the requested headers echoed (a wildcard
    would not cover Authorization)."""
    out = {
        "Access-Control-Allow-Methods": CORS_METHODS,
        "Access-Control-Max-Age": CORS_MAX_AGE,
        "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
    }
    if headers.get("Access-Control-Request-Headers"):
        out["Access-Control-Allow-Headers"] = headers["Access-Control-Request-Headers"]
    return out


def cors_headers(headers):
    """The headers that make an answer to a cross-origin request readable
    by its page (none without Origin)."""
    return {"Access-Control-Allow-Origin": "*"} if headers.get("Origin") else {}
