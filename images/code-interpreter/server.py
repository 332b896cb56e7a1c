"""Warren's code interpreter server: the HTTP API that @e2b/code-interpreter
speaks (port 49999 in a sandbox of the code-interpreter-v1 template).

Each context is a Python Jupyter kernel (over Debian's jupyter_client), or
a bash or Node.js session this server keeps. POST /execute answers one
JSON object per line: stdout, stderr, result, error,
number_of_executions and end_of_execution. A client that goes away
interrupts its execution. Only the standard library and jupyter_client.

Every route but GET /health needs the sandbox's envd access token, as
envd does (access.py). When envd's init ID changes, the sandbox was
restored (a pool member, a template's snapshot, a resume, a fork): every
context renews its random state before its next execution
(sessions.Context.reseed_pending), so that no two sandboxes restored from one image draw
the same numbers.
"""

import json
import os
import re
import socket
import sys
import threading
import time
import traceback
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import access  # noqa: E402
from sessions import BashContext, JSContext, PythonContext  # noqa: E402

PORT = int(os.environ.get("WARREN_CODE_INTERPRETER_PORT", "49999"))
MAX_BODY = 64 << 20
ENVD = access.Envd(os.environ.get("WARREN_ENVD_URL", "http://127.0.0.1:49983"))
DEFAULT_CWD = os.environ.get("WARREN_CODE_INTERPRETER_CWD", os.path.expanduser("~"))
LANGUAGES = {"python": PythonContext, "bash": BashContext, "javascript": JSContext}
ALIASES = {"py": "python", "python3": "python", "js": "javascript", "node": "javascript", "sh": "bash"}


def log(msg, **kv):
    fields = " ".join(f"{k}={json.dumps(v)}" for k, v in kv.items())
    print(f"code-interpreter: {msg} {fields}".rstrip(), file=sys.stderr, flush=True)


class BadRequest(Exception):
    pass


class NotFound(Exception):
    pass


class Registry:
    """The contexts by ID, and the default context of each language."""

    def __init__(self):
        self.lock = threading.Lock()
        self.contexts = {}
        self.defaults = {}
        self.init_id = None  # envd's init ID at the last admitted request

    def observe(self, init_id):
        """Notes envd's init ID of an admitted request. Another one than
        the last means the sandbox was restored in between (or the server
        just started): the contexts that lived before it renew their
        random state before their next execution."""
        with self.lock:
            if init_id == self.init_id:
                return
            self.init_id = init_id
            for ctx in self.contexts.values():
                ctx.reseed_pending = True

    def create(self, language, cwd, preimport=False):
        language = normalize_language(language)
        ctx = LANGUAGES[language](str(uuid.uuid4()), cwd or DEFAULT_CWD)
        ctx.preimport = preimport
        started = time.monotonic()
        ctx.start()
        with self.lock:
            self.contexts[ctx.id] = ctx
        log("context created", id=ctx.id, language=language, cwd=ctx.cwd, seconds=round(time.monotonic() - started, 2))
        return ctx

    def default(self, language):
        language = normalize_language(language)
        with self.lock:
            ctx = self.defaults.get(language)
            if ctx is not None:
                return ctx
        ctx = self.create(language, DEFAULT_CWD, preimport=language == "python")
        with self.lock:
            if language in self.defaults:  # another request made it first
                winner = self.defaults[language]
            else:
                self.defaults[language] = winner = ctx
        if winner is not ctx:
            self.remove(ctx.id)
        return winner

    def get(self, ctx_id):
        with self.lock:
            ctx = self.contexts.get(ctx_id)
        if ctx is None:
            raise NotFound(f"context {ctx_id} not found")
        return ctx

    def remove(self, ctx_id):
        with self.lock:
            ctx = self.contexts.pop(ctx_id, None)
            for lang, d in list(self.defaults.items()):
                if d is ctx:
                    del self.defaults[lang]
        if ctx is None:
            raise NotFound(f"context {ctx_id} not found")
        ctx.shutdown()
        log("context removed", id=ctx_id)

    def list(self):
        with self.lock:
            return [c.describe() for c in self.contexts.values()]


def normalize_language(language):
    lang = (language or "python").strip().lower()
    lang = ALIASES.get(lang, lang)
    if lang not in LANGUAGES:
        raise BadRequest(f"unsupported language {language!r}: use one of {', '.join(sorted(LANGUAGES))}")
    return lang


REGISTRY = Registry()
READY = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "warren-code-interpreter"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_DELETE(self):
        self.route("DELETE")

    def do_OPTIONS(self):
        self.route("OPTIONS")

    def do_PUT(self):
        self.route("PUT")

    def do_PATCH(self):
        self.route("PATCH")

    def route(self, method):
        path = self.path.split("?", 1)[0]
        try:
            if method == "GET" and path == "/health":
                if not READY.is_set():
                    return self.reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "kernel starting"})
                return self.reply(HTTPStatus.OK, "OK")
            if access.is_preflight(method, self.headers):
                return self.reply(HTTPStatus.NO_CONTENT, None, access.preflight_headers(self.headers))
            token = self.headers.get(access.ACCESS_TOKEN_HEADER)
            self.session = ENVD.admit(token)
            access.check_body_type(method, self.headers)
            REGISTRY.observe(self.session.init_id)
            path = path.rstrip("/") or "/"
            if method == "POST" and path == "/execute":
                return self.execute()
            if path == "/contexts":
                if method == "GET":
                    return self.reply(HTTPStatus.OK, REGISTRY.list())
                if method == "POST":
                    body = self.body()
                    ctx = REGISTRY.create(body.get("language"), body.get("cwd"))
                    return self.reply(HTTPStatus.OK, ctx.describe())
            m = re.fullmatch(r"/contexts/([^/]+)(/restart)?", path)
            if m and method == "DELETE" and not m.group(2):
                self.body()
                REGISTRY.remove(m.group(1))
                return self.reply(HTTPStatus.NO_CONTENT, None)
            if m and method == "POST" and m.group(2):
                self.body()
                REGISTRY.get(m.group(1)).restart()
                return self.reply(HTTPStatus.NO_CONTENT, None)
            self.body()
            self.reply(HTTPStatus.NOT_FOUND, {"error": f"no route {method} {path}"})
        except access.Denied as e:
            # Its body, if any, is not read: the connection ends, and the
            # client (the proxy) is told so, lest it send more on it.
            self.reply(e.status, {"error": e.message}, {"Connection": "close"})
        except BadRequest as e:
            self.reply(HTTPStatus.BAD_REQUEST, {"error": str(e)})
        except NotFound as e:
            self.reply(HTTPStatus.NOT_FOUND, {"error": str(e)})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:
            log("request failed", method=method, path=path, error=traceback.format_exc())
            try:
                self.reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})
            except OSError:
                pass

    def body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            raw = self.chunked_body()
        else:
            n = int(self.headers.get("Content-Length") or 0)
            if n > MAX_BODY:
                raise BadRequest("request body too large")
            raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise BadRequest(f"request body is not JSON: {e}")
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        return body

    def chunked_body(self):
        raw = b""
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return raw
            if len(raw) + size > MAX_BODY:
                raise BadRequest("request body too large")
            raw += self.rfile.read(size)
            self.rfile.readline()

    def end_headers(self):
        # Every answer, refusals included, is readable by a cross-origin
        # page (headers is unset when the request line did not parse).
        for k, v in access.cors_headers(getattr(self, "headers", None) or {}).items():
            self.send_header(k, v)
        super().end_headers()

    def reply(self, status, payload, headers=None):
        data = b"" if payload is None else json.dumps(payload).encode() if not isinstance(payload, str) else payload.encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if payload is not None:
            self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
        if status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def client_gone(self):
        """True once the client closed its side (it timed out or aborted)."""
        sock = self.connection
        try:
            sock.setblocking(False)
            try:
                return sock.recv(1, socket.MSG_PEEK) == b""
            finally:
                sock.setblocking(True)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def execute(self):
        body = self.body()
        code = body.get("code")
        if not isinstance(code, str):
            raise BadRequest("code (a string) is required")
        ctx_id, language = body.get("context_id"), body.get("language")
        if ctx_id and language:
            raise BadRequest("give context_id or language, not both")
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict):
            raise BadRequest("env_vars must be an object of strings")
        env_vars = {str(k): str(v) for k, v in env_vars.items()}
        ctx = REGISTRY.get(ctx_id) if ctx_id else REGISTRY.default(language)
        envs = self.session.envs

        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        state = {"gone": False}

        def emit(msg):
            if state["gone"]:
                return
            line = json.dumps(msg).encode() + b"\n"
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            except OSError:
                state["gone"] = True

        def cancelled():
            if not state["gone"] and self.client_gone():
                state["gone"] = True
            return state["gone"]

        ctx.execute(code, envs, env_vars, emit, cancelled)
        if state["gone"]:
            log("client went away: execution interrupted", context=ctx.id)
            self.close_connection = True
            return
        emit({"type": "end_of_execution"})
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True


def main():
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    server.daemon_threads = True

    def warm():
        try:
            REGISTRY.default("python").warm()
            READY.set()
            log("ready", port=PORT)
        except Exception:
            log("default python kernel failed", error=traceback.format_exc())
            os._exit(1)

    threading.Thread(target=warm, daemon=True).start()
    log("listening", port=PORT)
    server.serve_forever()


if __name__ == "__main__":
    main()
