# minik8s function runtime for Python (knative-lite).
#
# One file, Python 3.11 standard library only. Pods run it as `python3 -u -c <this file>`
# (so there is no __file__), and the control plane runs `python3 -I -c <this file> --check`
# to validate a function's source without executing it.
#
# Serving (env PORT, default 8080):
#   GET  /healthz        200 "ok", always.
#   GET  /v1/status      {"specialized": name-or-null, "inFlight": n}
#   POST /v1/specialize  {"source", "handler"?, "name"?, "sitePackages"?}: load the function
#                        (generic pool pods start without one). 200, 400 or 409.
#   anything else        the function: handler(body) or handler(body, headers), answered as
#                        JSON; 503 before specialisation, 500 when the handler raises
#                        ({"error", "errorType", "errorMessage"}, as Lambda reports it).
# A pod whose environment has MINIK8S_FN_SOURCE is specialised at start instead.
# On SIGTERM the server drains: it keeps serving until nothing has been in flight for a
# second (and a second has passed), then exits 0.

import ast
import asyncio
import http.server
import inspect
import json
import linecache
import os
import signal
import sys
import threading
import time
import traceback
import types

DEFAULT_HANDLER = "handle"
DEFAULT_NAME = "function"
DRAIN_IDLE = 1.0  # seconds with no request in flight before a draining server stops
DRAIN_MIN = 1.0  # a draining server serves at least this long after SIGTERM
DRAIN_MAX = 25.0  # and at most this long


class LoadError(Exception):
    """A function that cannot be loaded; the message is what the caller is told."""


def describe(exc, filename=None):
    """`Type: message`, plus `(file, line N)` of the innermost frame in `filename`."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, SyntaxError) or filename is None:
        return text  # a SyntaxError's message already names the file and line
    lines = [tb.tb_lineno for tb in walk_tb(exc.__traceback__)
             if tb.tb_frame.f_code.co_filename == filename]
    return f"{text} ({filename}, line {lines[-1]})" if lines else text


def walk_tb(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


class Function:
    """A loaded function: its name, its handler, and how many arguments the handler takes."""

    def __init__(self, name, handler):
        self.name = name
        self.handler = handler
        self.arity = arity(handler)

    def __call__(self, body, headers):
        result = self.handler(*(body, headers)[:self.arity])
        if inspect.iscoroutine(result):  # an `async def` handler
            result = asyncio.run(result)
        return result


def arity(handler):
    """0, 1 or 2: the positional arguments to pass (body, then headers). Fallback: 1."""
    try:
        params = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return 1
    count = 0
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            return 2
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            count += 1
    return min(count, 2)


def load(source, handler_name, name, site_packages=None):
    """Compile and execute the module, and find its handler; raises LoadError."""
    filename = f"{name}.py"
    if site_packages and site_packages not in sys.path:
        sys.path.insert(0, site_packages)
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes in the source
        raise LoadError(describe(e)) from None
    # Tracebacks show the function's source lines although no file holds it.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    # Registered like an imported module (so it can import itself), unless that would
    # shadow a module already loaded (a function named like a standard module).
    registered = name not in sys.modules
    if registered:
        sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException as e:  # SystemExit from the module is a load failure too
        if registered:
            sys.modules.pop(name, None)
        traceback.print_exc()
        raise LoadError(describe(e, filename)) from None
    if handler_name not in module.__dict__:
        raise LoadError(f"handler '{handler_name}' not found in {filename}")
    handler = module.__dict__[handler_name]
    if not callable(handler):
        raise LoadError(f"handler '{handler_name}' in {filename} is not callable")
    return Function(name, handler)


class Runtime:
    """What the request threads share: the function, once loaded, and the in-flight count."""

    def __init__(self):
        self.function = None
        self.specialize_lock = threading.Lock()
        self.lock = threading.Lock()  # guards the counters below
        self.in_flight = 0
        self.idle_since = time.monotonic()
        self.draining = False

    def specialize(self, source, handler, name, site_packages=None):
        """(status, JSON body) of a specialize request; only the first success counts."""
        with self.specialize_lock:
            if self.function is not None:
                return 409, {"error": f"already specialized as {self.function.name}"}
            try:
                self.function = load(source, handler, name, site_packages)
            except LoadError as e:
                return 400, {"error": str(e)}
            return 200, {"specialized": name}

    def enter(self):
        with self.lock:
            self.in_flight += 1

    def leave(self):
        with self.lock:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.idle_since = time.monotonic()

    def drain(self, server):
        """Stop the server once idle (see DRAIN_*); runs on its own thread."""
        start = time.monotonic()
        while True:
            now = time.monotonic()
            with self.lock:
                idle = self.in_flight == 0 and now - self.idle_since >= DRAIN_IDLE
            if (idle and now - start >= DRAIN_MIN) or now - start >= DRAIN_MAX:
                break
            time.sleep(0.05)
        server.shutdown()  # returns once serve_forever (on the main thread) has returned


RUNTIME = Runtime()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every answer has a Content-Length
    server_version = "minik8s-python"
    # Headers and body are separate writes: without TCP_NODELAY the body waits for the
    # router's delayed ACK (40 ms a request on a kept-alive connection).
    disable_nagle_algorithm = True

    def log_request(self, code="-", size="-"):
        pass  # no access log

    def do_GET(self):
        try:
            body = self.read_body()
        except ValueError as e:
            self.close_connection = True
            return self.reply_json(400, {"error": f"bad request body: {e}"})
        path = self.path.split("?", 1)[0]
        if self.command == "GET" and path == "/healthz":
            return self.reply(200, b"ok", "text/plain")
        if self.command == "GET" and path == "/v1/status":
            fn = RUNTIME.function
            return self.reply_json(200, {"specialized": fn and fn.name,
                                         "inFlight": RUNTIME.in_flight})
        if self.command == "POST" and path == "/v1/specialize":
            return self.specialize(body)
        if RUNTIME.function is None:
            return self.reply_json(503, {"error": "not specialized"})
        RUNTIME.enter()
        try:
            self.invoke(RUNTIME.function, body)
        finally:
            RUNTIME.leave()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def read_body(self):
        """The request body as bytes (Content-Length or chunked); b"" when there is none."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after the chunk
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError("negative Content-Length")
        return self.rfile.read(length) if length else b""

    def specialize(self, raw):
        try:
            req = json.loads(raw)
            source = req["source"]
            handler = req.get("handler") or DEFAULT_HANDLER
            name = req.get("name") or DEFAULT_NAME
            site_packages = req.get("sitePackages")
            if not all(isinstance(v, str) for v in (source, handler, name)):
                raise ValueError("source, handler and name must be strings")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return self.reply_json(400, {"error": f"bad specialize request: {e!r}"})
        self.reply_json(*RUNTIME.specialize(source, handler, name, site_packages))

    def invoke(self, fn, raw):
        """Call the handler with the body (JSON when it parses, else text, None if empty)."""
        if not raw:
            body = None
        else:
            try:
                body = json.loads(raw)
            except ValueError:  # UnicodeDecodeError included
                body = raw.decode("utf-8", errors="replace")
        headers = {}
        for key, value in self.headers.items():
            key = key.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        try:
            result = fn(body, headers)
        except BaseException as e:  # the server outlives whatever the handler does
            traceback.print_exc()
            # As AWS Lambda reports a function's error, so a workflow's Retry and Catch
            # can match the exception's class by name.
            kind = type(e).__name__
            return self.reply_json(500, {"error": f"{kind}: {e}", "errorType": kind,
                                         "errorMessage": str(e)})
        status = 200
        if (isinstance(result, tuple) and len(result) == 2 and type(result[1]) is int
                and 100 <= result[1] <= 599):
            result, status = result
        self.reply_json(status, result)

    def reply_json(self, status, value):
        try:
            data = json.dumps(value)
        except (TypeError, ValueError):  # not serialisable (or circular): its str()
            data = json.dumps(str(value))
        self.reply(status, data.encode(), "application/json")

    def reply(self, status, data, content_type):
        if status in (204, 304) or status < 200:
            data = b""  # answers that may not have a body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if RUNTIME.draining:  # send clients elsewhere while this pod stops
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD" and data:
            self.wfile.write(data)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def serve():
    source = os.environ.get("MINIK8S_FN_SOURCE")
    if source is not None:  # specialised at start; a function that fails to load crashes
        status, body = RUNTIME.specialize(
            source,
            os.environ.get("MINIK8S_FN_HANDLER") or DEFAULT_HANDLER,
            os.environ.get("MINIK8S_FN_NAME") or DEFAULT_NAME,
            os.environ.get("MINIK8S_FN_SITE_PACKAGES"))
        if status != 200:
            print(f"cannot load the function: {body['error']}", file=sys.stderr)
            sys.exit(1)
    port = int(os.environ.get("PORT") or 8080)
    server = Server(("0.0.0.0", port), Handler)

    def on_sigterm(signum, frame):
        if not RUNTIME.draining:
            RUNTIME.draining = True
            threading.Thread(target=RUNTIME.drain, args=(server,), daemon=True).start()

    signal.signal(signal.SIGTERM, on_sigterm)
    fn = RUNTIME.function
    print(f"serving {fn.name if fn else 'nothing (waiting to be specialized)'} on :{port}",
          file=sys.stderr)
    server.serve_forever()
    server.server_close()
    sys.exit(0)


def bound_names(statements):
    """Names bound at a module's top level (also inside if/try/with/for/while blocks)."""
    for st in statements:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield st.name
            continue
        if isinstance(st, ast.Assign):
            targets = st.targets
        elif isinstance(st, (ast.AnnAssign, ast.AugAssign)) and st.value is not None:
            targets = [st.target]
        else:
            targets = []
        for target in targets:
            yield from (n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            for alias in st.names:  # `*` may bind anything
                yield alias.asname or alias.name.split(".")[0]
        for field in ("body", "orelse", "finalbody"):
            yield from bound_names(getattr(st, field, None) or [])
        for clause in getattr(st, "handlers", []) + getattr(st, "cases", []):  # except, case
            yield from bound_names(clause.body)


def check(stdin):
    """Validate a function's source without running it: the JSON answer of --check."""
    try:
        req = json.loads(stdin)
        source = req["source"]
        handler = req.get("handler") or DEFAULT_HANDLER
        filename = f"{req.get('name') or DEFAULT_NAME}.py"
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return {"ok": False, "error": f"bad check request: {e!r}"}
    try:
        tree = ast.parse(source, filename)
        compile(tree, filename, "exec", dont_inherit=True)  # e.g. `return` outside a def
    except (SyntaxError, ValueError) as e:
        return {"ok": False, "error": describe(e)}
    names = set(bound_names(tree.body))
    if handler not in names and "*" not in names:
        return {"ok": False, "error": f"handler '{handler}' not found in {filename}"}
    return {"ok": True}


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        print(json.dumps(check(sys.stdin.buffer.read())))
    else:
        serve()
