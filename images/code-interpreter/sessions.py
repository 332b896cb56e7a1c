"""The code interpreter's contexts: a Jupyter kernel per Python context,
and bash and Node.js sessions the server keeps. Each runs one execution
at a time; execute(code, envs, env_vars, emit, cancelled) sends the
output lines through emit and stops (interrupting the code) once
cancelled() is true.

A context whose reseed_pending is set (the sandbox was restored since
it started: server.Registry.observe) renews its random state from fresh
entropy before the next execution: Python's random, numpy's global
RandomState, OpenSSL's generator (ssl.RAND_add) and tempfile's names in
a kernel, $RANDOM in bash, Math.random in JavaScript. Kernels speak to
the server over Unix sockets in a directory of the server's own, not
over loopback ports (which envd would forward to the sandbox's address).
"""

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from jupyter_client import KernelManager

HERE = os.path.dirname(os.path.abspath(__file__))
POLL = 0.2  # seconds between checks of the client and the kernel
KERNEL_ARGS = [
    "--InteractiveShell.colors=NoColor",
    "--IPKernelApp.exec_files=" + os.path.join(HERE, "kernel_startup.py"),
]
# The kernels' Unix sockets (mode 0700, the server's user's).
KERNEL_SOCKETS = tempfile.mkdtemp(prefix="warren-kernels-")

# Run in a kernel after a restore: new seeds, from the kernel's own
# os.urandom (the sandbox's kernel: fresh in every copy), for the
# generators a program uses without making its own. Each step stands alone.
RESEED_PYTHON = """
import os as _w_os, sys as _w_sys
for _w_step in (
    lambda: __import__("random").seed(),
    lambda: _w_sys.modules["numpy.random"].seed() if "numpy.random" in _w_sys.modules else None,
    lambda: __import__("ssl").RAND_add(_w_os.urandom(32), 32.0),
    lambda: setattr(__import__("tempfile"), "_name_sequence", None),
):
    try:
        _w_step()
    except Exception:
        pass
del _w_os, _w_sys, _w_step
"""

# Kernel MIME types and the fields of the SDK's Result.
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "application/vnd.warren.data+json": "data",
}


def now_us():
    return int(time.time() * 1e6)


def out(kind, text):
    return {"type": kind, "text": text, "timestamp": now_us()}


def result(data, main):
    msg = {"type": "result", "is_main_result": main}
    for mime, value in data.items():
        msg[MIME_FIELDS.get(mime, mime)] = value
    return msg


def error(name, value, tb):
    return {"type": "error", "name": name, "value": value, "traceback": tb}


class Context:
    language = ""
    # reseed_pending: the sandbox was restored since this context's
    # process started; its random state is renewed before the next
    # execution (cleared when a process starts).
    reseed_pending = False

    def __init__(self, ctx_id, cwd):
        self.id, self.cwd = ctx_id, cwd
        self.lock = threading.Lock()

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def warm(self):
        pass


class PythonContext(Context):
    """A Python context: an IPython kernel over the Jupyter protocol."""

    language = "python"

    # preimport: the kernel imports numpy, pandas and matplotlib before its
    # first cell (the default context, whose kernel the snapshot holds);
    # other contexts start faster and import on first use.
    preimport = False

    def start(self):
        self.km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(KERNEL_SOCKETS, self.id))
        self._launch()

    def _launch(self):
        env = dict(os.environ, WARREN_KERNEL_PREIMPORT="1" if self.preimport else "")
        self.reseed_pending = False
        self.km.start_kernel(cwd=self.cwd, extra_arguments=KERNEL_ARGS, env=env)
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def warm(self):
        # One execution loads the start-up file's imports for sure.
        self._silent("1")

    def shutdown(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
        except Exception:
            pass

    def restart(self):
        with self.lock:
            self.reseed_pending = False
            self.km.restart_kernel(now=True)
            self.kc.stop_channels()
            self.kc = self.km.blocking_client()
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=120)

    def _silent(self, code, timeout=60):
        """Runs code without output or history; True when it succeeded."""
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                reply = self.kc.get_shell_msg(timeout=POLL)
            except queue.Empty:
                if not self.km.is_alive():
                    return False
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"].get("status") == "ok"
        return False

    def execute(self, code, envs, env_vars, emit, cancelled):
        with self.lock:
            if not self.km.is_alive():
                self._revive(emit, "The kernel was not running")
                return
            if self.reseed_pending:
                self.reseed_pending = False
                if not self._silent(RESEED_PYTHON):
                    print(f"code-interpreter: context {self.id}: the kernel's random state was not renewed", file=sys.stderr, flush=True)
            restore = None
            if envs or env_vars:
                # Global envs stay; per-call ones are put back afterwards.
                setup = ("import os as _w_os\n"
                         f"_w_os.environ.update({envs!r})\n"
                         f"_w_saved = {{k: _w_os.environ.get(k) for k in {list(env_vars)!r}}}\n"
                         f"_w_os.environ.update({env_vars!r})\n")
                self._silent(setup)
                if env_vars:
                    restore = ("for _w_k, _w_v in _w_saved.items():\n"
                               "    _w_os.environ.pop(_w_k, None) if _w_v is None else _w_os.environ.__setitem__(_w_k, _w_v)\n"
                               "del _w_saved\n")
            try:
                self._run(code, emit, cancelled)
            finally:
                if restore and self.km.is_alive():
                    self._silent(restore)

    def _run(self, code, emit, cancelled):
        msg_id = self.kc.execute(code, store_history=True, allow_stdin=False)
        interrupted_at = None
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=POLL)
            except queue.Empty:
                if not self.km.is_alive():
                    self._revive(emit, "The kernel died while running this code")
                    return
                if interrupted_at is None and cancelled():
                    self.km.interrupt_kernel()
                    interrupted_at = time.monotonic()
                elif interrupted_at is not None and time.monotonic() - interrupted_at > 10:
                    # The interrupt did not stop it (C code ignoring SIGINT).
                    self._revive(None, "")
                    return
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                emit(out("stdout" if content.get("name") == "stdout" else "stderr", content.get("text", "")))
            elif kind == "execute_input":
                emit({"type": "number_of_executions", "execution_count": content.get("execution_count", 0)})
            elif kind == "execute_result":
                emit(result(content.get("data", {}), True))
            elif kind == "display_data":
                emit(result(content.get("data", {}), False))
            elif kind == "error":
                emit(error(content.get("ename", "Error"), content.get("evalue", ""), "\n".join(content.get("traceback", []))))
            elif kind == "status" and content.get("execution_state") == "idle":
                return
            if interrupted_at is None and cancelled():
                self.km.interrupt_kernel()
                interrupted_at = time.monotonic()

    def _revive(self, emit, why):
        """Reports a dead kernel as an error and starts a new one."""
        if emit is not None:
            emit(error("KernelDied", why + "; a new kernel was started (the context's variables are lost).", ""))
        self.reseed_pending = False
        try:
            self.km.restart_kernel(now=True)
            self.kc.stop_channels()
            self.kc = self.km.blocking_client()
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=120)
        except Exception:
            self._launch()


class ProcessContext(Context):
    """A context backed by a long-lived process this server keeps; an
    interrupted or dead process is replaced by a new one (its state is
    lost)."""

    def start(self):
        self.reseed_pending = False
        self.proc = subprocess.Popen(
            self.argv(), cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, bufsize=0)
        self.lines = queue.Queue()
        for stream, name in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr")):
            threading.Thread(target=self._pump, args=(stream, name, self.lines), daemon=True).start()

    @staticmethod
    def _pump(stream, name, lines):
        for line in iter(stream.readline, b""):
            lines.put((name, line.decode("utf-8", "replace")))
        lines.put((name, None))

    def shutdown(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()

    def restart(self):
        with self.lock:
            self.shutdown()
            self.start()

    def execute(self, code, envs, env_vars, emit, cancelled):
        with self.lock:
            if self.proc.poll() is not None:
                emit(error("SessionDied", f"The {self.language} session had ended; a new one was started (its state is lost).", ""))
                self.shutdown()
                self.start()
            marker = uuid.uuid4().hex
            reseed, self.reseed_pending = self.reseed_pending, False
            try:
                self.proc.stdin.write(self.request(code, envs, env_vars, marker, reseed))
                self.proc.stdin.flush()
            except OSError:
                pass
            self.collect(marker, emit, cancelled)

    def interrupted(self, emit):
        self.shutdown()
        self.start()


class BashContext(ProcessContext):
    """A bash context: one bash process; code runs in it (source), so
    variables, functions and the working directory persist."""

    language = "bash"

    def argv(self):
        return ["bash", "--noprofile", "--norc"]

    def request(self, code, envs, env_vars, marker, reseed):
        path = f"/tmp/.warren-cell-{marker}.sh"
        with open(path, "w") as f:
            f.write(code + "\n")
        lines = [f"export {k}={shlex.quote(v)}" for k, v in envs.items()]
        if reseed:
            # Assigning RANDOM seeds bash's generator.
            lines.insert(0, f"RANDOM={int.from_bytes(os.urandom(4), 'big')}")
        for k, v in env_vars.items():
            lines.append(f"_w_had_{k}=${{{k}+x}} _w_old_{k}=${{{k}-}}; export {k}={shlex.quote(v)}")
        lines.append(f"source {path}; _w_rc=$?; rm -f {path}")
        for k in env_vars:
            lines.append(f'if [ -n "$_w_had_{k}" ]; then export {k}="$_w_old_{k}"; else unset {k}; fi; unset _w_had_{k} _w_old_{k}')
        lines.append(f"printf '\\n{marker} %d\\n' $_w_rc; printf '\\n{marker}\\n' >&2")
        return ("\n".join(lines) + "\n").encode()

    def collect(self, marker, emit, cancelled):
        done, rc, pending = set(), 0, {"stdout": "", "stderr": ""}
        while len(done) < 2:
            try:
                name, line = self.lines.get(timeout=POLL)
            except queue.Empty:
                if cancelled():
                    self.interrupted(emit)
                    return
                if self.proc.poll() is not None and self.lines.empty():
                    emit(error("SessionDied", f"The bash session exited (status {self.proc.returncode}); a new one was started.", ""))
                    self.shutdown()
                    self.start()
                    return
                continue
            if line is None:
                done.add(name)
                continue
            if line.startswith(marker):
                done.add(name)
                if name == "stdout":
                    rc = int(line.split()[1])
                # The marker's leading newline ends a last line without one.
                if pending[name] not in ("", "\n"):
                    emit(out(name, pending[name].rstrip("\n")))
                pending[name] = ""
                continue
            if pending[name]:
                emit(out(name, pending[name]))
            pending[name] = line
        if rc != 0:
            emit(error("ExitCode", f"the code exited with status {rc}", f"exit status {rc}"))


class JSContext(ProcessContext):
    """A JavaScript context: one Node.js process evaluating cells in a
    persistent vm context (jsrepl.js)."""

    language = "javascript"

    def argv(self):
        return ["node", os.path.join(HERE, "jsrepl.js")]

    def request(self, code, envs, env_vars, marker, reseed):
        req = {"id": marker, "code": code, "envs": envs, "env_vars": env_vars}
        if reseed:
            req["seed"] = os.urandom(32).hex()
        return (json.dumps(req) + "\n").encode()

    def collect(self, marker, emit, cancelled):
        while True:
            try:
                name, line = self.lines.get(timeout=POLL)
            except queue.Empty:
                if cancelled():
                    self.interrupted(emit)
                    return
                if self.proc.poll() is not None and self.lines.empty():
                    emit(error("SessionDied", f"The Node.js session exited (status {self.proc.returncode}); a new one was started.", ""))
                    self.shutdown()
                    self.start()
                    return
                continue
            if line is None:
                continue
            if name == "stderr":
                emit(out("stderr", line))
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                emit(out("stdout", line))
                continue
            if msg.get("id") != marker:
                continue
            if msg.get("type") == "done":
                return
            msg.pop("id", None)
            if msg.get("type") in ("stdout", "stderr"):
                msg["timestamp"] = now_us()
            emit(msg)
