# code-sandboxes lightweight Python kernel (stdlib only).
#
# Driven by internal/kernel (Go). File descriptors:
#   0      /dev/null
#   1, 2   pipes read by Go: fd-level output of the kernel and its children
#   3      commands from Go (framed, see below)
#   4      events to Go (framed JSON)
# Frame: b"\xfeK" + 4-byte big-endian payload length + payload.
# Command payload: a sequence of fields, each a 4-byte big-endian length + bytes;
# the first field is the command name. Event payload: one JSON object.
#
# Ordering: Python-level writes to sys.stdout/sys.stderr go to private dups of
# fds 1 and 2, so they share the pipes with fd-level child output. Before every
# event frame (and whenever Python-level output switches stream) the kernel
# writes a sync marker MARK + token + b":" + epoch + b"\x1f" to both pipes and
# tags the frame with that epoch; Go emits a frame only after it has read each
# pipe up to the frame's marker, and holds back pipe data after a marker until
# the frame is processed. That gives one ordered stream.
#
# Python-level output is line buffered so print("hi") reaches Go as one
# "hi\n" chunk, like Jupyter's: the pending text (one stream at a time) is
# written up to its last newline, all of it past _BUF_MAX, on flush(), before
# every frame, before child processes start (fork, os.system, subprocess), and
# by a daemon thread _FLUSH_DELAY after a partial line, so print(end="") still
# shows live.
#
# Startup cost matters: import nothing heavy here; json, traceback, asyncio,
# base64 helpers etc. are imported lazily when a cell needs them.

import sys
import os
import io
import builtins
import _thread
import _signal  # not "signal": that imports enum, a few ms of startup
from _json import encode_basestring_ascii as _jstr

_KFILE = sys._getframe().f_code.co_filename
_MAIN_THREAD = _thread.get_ident()
_CMD_FD = 3
_EVT_FD = 4
_MAGIC = b"\xfeK"
_FLAGS = 0x2000  # ast.PyCF_ALLOW_TOP_LEVEL_AWAIT (3.8+), without importing ast
_ONLY_AST = 0x400  # ast.PyCF_ONLY_AST
_CO_COROUTINE = 0x80


_BUF_MAX = 64 << 10
_FLUSH_DELAY = 0.05


class _State:
    token = b""
    max_event = 32 << 20
    max_frame = 33 << 20
    epoch = 0
    last = None  # stream of the last Python-level write since the last frame
    busy = False  # a command from Go is running: SIGINT raises
    crit = False  # main thread is writing a frame: defer SIGINT
    pending = False  # SIGINT arrived during crit
    buf = bytearray()  # Python-level output not yet written (a partial line)
    bufw = 1  # its stream
    armed = False  # a flusher thread will flush buf soon
    loop = None  # asyncio loop for top-level await, created on demand
    cells = {}  # filename -> source, registered in linecache lazily
    ns = None


_st = _State()
_lock = _thread.allocate_lock()  # guards pipe writes, frames and the buffer
_OUT = os.dup(1)  # private dups: user code redirecting fd 1/2 can't hide markers
_ERR = os.dup(2)
for _fd in (_CMD_FD, _EVT_FD):
    # Children must not inherit the protocol pipes: a leftover child holding
    # fd 4 would hide the kernel's death from Go.
    os.set_inheritable(_fd, False)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd, n):
    chunks = []
    while n > 0:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            raise EOFError
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


class _TooBig(ValueError):
    """An event frame would exceed the size Go accepts."""


class _Raw(str):
    """Already-encoded JSON text embedded verbatim by _enc."""


def _enc(o):
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, _Raw):
        return o
    if isinstance(o, str):
        return _jstr(o)
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return float.__repr__(o) if o == o and o not in (float("inf"), float("-inf")) else "null"
    if isinstance(o, dict):
        return "{" + ",".join(_jstr(str(k)) + ":" + _enc(v) for k, v in o.items()) + "}"
    if isinstance(o, (list, tuple)):
        return "[" + ",".join(_enc(v) for v in o) + "]"
    return _jstr(repr(o))


def _marker_locked():
    _st.epoch += 1
    m = b"\x1e" + _st.token + b":" + str(_st.epoch).encode() + b"\x1f"
    mask = 0
    for bit, fd in ((1, _OUT), (2, _ERR)):
        try:
            _write_all(fd, m)
            mask |= bit
        except OSError:
            pass
    return mask


def _send(obj, sync=True):
    """Send one event frame. Safe against SIGINT: an interrupt arriving in
    the middle is deferred so a frame is never cut in half. sync=False sends
    no pipe markers (mask 0): for frames that order nothing, such as "start",
    Go then need not wait on the output pipes."""
    body = _enc(obj)
    if len(body) + 64 > _st.max_frame:
        raise _TooBig(len(body))
    main = _thread.get_ident() == _MAIN_THREAD
    with _lock:
        if main:
            _st.crit = True
        try:
            if _st.buf:
                _flush_locked(False)
            mask = _marker_locked() if sync else 0
            payload = ('{"e":%d,"m":%d,%s' % (_st.epoch, mask, body[1:])).encode()
            _write_all(_EVT_FD, _MAGIC + len(payload).to_bytes(4, "big") + payload)
            _st.last = None
        finally:
            if main:
                _st.crit = False
    if main and _st.pending:
        _st.pending = False
        if _st.busy:
            raise KeyboardInterrupt


def _sync_locked(main):
    """Python-level output switches stream: a sync point so Go keeps the order."""
    if main:
        _st.crit = True
    try:
        mask = _marker_locked()
        payload = b'{"e":%d,"m":%d,"t":"sync"}' % (_st.epoch, mask)
        _write_all(_EVT_FD, _MAGIC + len(payload).to_bytes(4, "big") + payload)
    finally:
        if main:
            _st.crit = False


def _out_locked(which, data, main):
    """Write Python-level output to its pipe (caller holds _lock)."""
    if _st.last is not None and _st.last != which:
        _sync_locked(main)
    _st.last = which
    _write_all(_OUT if which == 1 else _ERR, data)


def _flush_locked(main):
    """Write out the pending partial line. It leaves the buffer first, so an
    interrupt in the middle of the write loses no more than that write."""
    data = bytes(_st.buf)
    _st.buf.clear()
    _out_locked(_st.bufw, data, main)


def _stream_write(which, data):
    main = _thread.get_ident() == _MAIN_THREAD
    with _lock:
        buf = _st.buf
        if buf and _st.bufw != which:
            _flush_locked(main)
        # Write up to the last newline (everything once the pending text
        # would exceed _BUF_MAX); keep the rest for later.
        cut = data.rfind(b"\n") + 1
        if len(buf) + len(data) - cut > _BUF_MAX:
            cut = len(data)
        if cut:
            if buf:
                head = bytes(buf) + memoryview(data)[:cut]
                buf.clear()
            else:
                head = data if cut == len(data) else memoryview(data)[:cut]
            _out_locked(which, head, main)
        if cut < len(data):
            buf += memoryview(data)[cut:]
            _st.bufw = which
            if not _st.armed:
                _st.armed = True
                _arm_flusher()
    if main and _st.pending:
        _st.pending = False
        if _st.busy:
            raise KeyboardInterrupt


def _flush_streams():
    """Write out pending Python-level output (sys.stdout/stderr.flush())."""
    if not _st.buf:
        return
    main = _thread.get_ident() == _MAIN_THREAD
    with _lock:
        if _st.buf:
            _flush_locked(main)
    if main and _st.pending:
        _st.pending = False
        if _st.busy:
            raise KeyboardInterrupt


def _arm_flusher():
    """Start a thread that writes the partial line soon (caller holds _lock).
    It lives only _FLUSH_DELAY, at most one at a time: no thread lingers
    (Python 3.12+ warns about os.fork() in a multi-threaded process)."""
    try:
        _thread.start_new_thread(_flusher, ())
    except RuntimeError:  # no threads left: the next write or frame flushes
        _st.armed = False


def _flusher():
    from time import sleep

    sleep(_FLUSH_DELAY)
    with _lock:
        _st.armed = False
        if _st.buf:
            try:
                _flush_locked(False)
            except Exception:
                pass


def _before_fork():
    # Write pending output so the child can't print it again. _lock is not
    # held across the fork: Python 3.12 warns about forking with threads
    # (the flusher) before running the after-fork hooks, and that warning
    # is written to sys.stderr.
    try:
        with _lock:
            if _st.buf:
                _flush_locked(_thread.get_ident() == _MAIN_THREAD)
    except Exception:
        pass


def _after_fork_child():
    # Only the forking thread exists in the child: another thread may have
    # held _lock or left a partial line at the moment of the fork.
    global _lock
    _lock = _thread.allocate_lock()
    _st.buf.clear()
    _st.armed = False


def _flushing(f):
    """Wrap f (which starts a child process) to write pending output first."""

    def wrapper(*args, **kwargs):
        _flush_streams()
        return f(*args, **kwargs)

    for a in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(wrapper, a, getattr(f, a))
        except (AttributeError, TypeError):
            pass
    wrapper.__wrapped__ = f
    return wrapper


class _BinStream(io.RawIOBase):
    def __init__(self, which):
        self._which = which

    def writable(self):
        return True

    def write(self, b):
        b = bytes(b)
        if b:
            _stream_write(self._which, b)
        return len(b)

    def flush(self):
        _flush_streams()

    def fileno(self):
        return self._which


class _Stream(io.TextIOBase):
    """sys.stdout/sys.stderr: line buffered, and a partial line is written
    after _FLUSH_DELAY, so print(..., end='') still shows live."""

    def __init__(self, which, name):
        self._which = which
        self._name = name
        self.buffer = _BinStream(which)

    name = property(lambda self: self._name)
    encoding = property(lambda self: "utf-8")
    errors = property(lambda self: "backslashreplace")
    line_buffering = property(lambda self: True)

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._which

    def flush(self):
        _flush_streams()

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not " + type(s).__name__)
        if s:
            _stream_write(self._which, s.encode("utf-8", "backslashreplace"))
        return len(s)


def _note(msg):
    try:
        _stream_write(2, (msg + "\n").encode("utf-8", "backslashreplace"))
    except OSError:
        pass


# ---------------------------------------------------------------- display

_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
    ("application/pdf", "_repr_pdf_"),
)
_BINARY = ("image/png", "image/jpeg", "application/pdf")


def _b64(b):
    import binascii

    return binascii.b2a_base64(bytes(b), newline=False).decode("ascii")


def _is_figure(obj):
    mf = sys.modules.get("matplotlib.figure")
    return mf is not None and isinstance(obj, mf.Figure)


def _figure_bundle(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return {"image/png": buf.getvalue(), "text/plain": repr(fig)}, {}


def _repr_warn(obj, meth, e):
    _note("[display] %s.%s() raised %s: %s" % (type(obj).__name__, meth, type(e).__name__, e))


def _bundle(obj, include=None, exclude=None):
    """IPython's display formatter, reduced: returns (data, metadata)."""
    data, md = {}, {}
    if _is_figure(obj):
        data, md = _figure_bundle(obj)
    elif not isinstance(obj, type):
        f = getattr(obj, "_repr_mimebundle_", None)
        if callable(f):
            try:
                r = f(include=include, exclude=exclude)
            except KeyboardInterrupt:
                raise
            except Exception as e:
                _repr_warn(obj, "_repr_mimebundle_", e)
                r = None
            if isinstance(r, tuple) and len(r) == 2:
                r, m = r
                if isinstance(m, dict):
                    md.update(m)
            if isinstance(r, dict):
                data.update(r)
        for mime, meth in _REPR_METHODS:
            if mime in data:
                continue
            f = getattr(obj, meth, None)
            if not callable(f):
                continue
            try:
                r = f()
            except KeyboardInterrupt:
                raise
            except Exception as e:
                _repr_warn(obj, meth, e)
                continue
            if isinstance(r, tuple) and len(r) == 2:
                r, m = r
                if isinstance(m, dict):
                    md[mime] = m
            if r is not None:
                data[mime] = r
    if "text/plain" not in data:
        try:
            data["text/plain"] = repr(obj)
        except KeyboardInterrupt:
            raise
        except Exception as e:
            data["text/plain"] = "<repr of %s raised %s>" % (type(obj).__name__, type(e).__name__)
    if include:
        data = {k: v for k, v in data.items() if k in include}
    if exclude:
        data = {k: v for k, v in data.items() if k not in exclude}
    return data, md


def _publish(data, md, main):
    """Encode a MIME bundle and send it, unless it is too big for one event."""
    size = 0
    out = {}
    for mime, v in data.items():
        if isinstance(v, (bytes, bytearray, memoryview)):
            if mime in _BINARY or mime.startswith("image/"):
                size += len(v) * 4 // 3
                if size > _st.max_event:
                    break
                v = _b64(v)
            else:
                v = bytes(v).decode("utf-8", "replace")
        if isinstance(v, str):
            size += len(v)
        elif mime == "application/json" or mime.endswith("+json") or not isinstance(v, str):
            if size > _st.max_event:
                break
            import json

            try:
                v = _Raw(json.dumps(v, default=repr))
            except (TypeError, ValueError) as e:
                _note("[display] %s payload is not JSON-encodable: %s" % (mime, e))
                continue
            size += len(v)
        if size > _st.max_event:
            break
        out[mime] = v
    if size <= _st.max_event:
        try:
            _send({"t": "display", "main": bool(main), "data": out, "md": md})
            return
        except _TooBig:
            pass
    _note(
        "[display output dropped: the %s payload is over the limit of %d bytes per event]"
        % ("main result" if main else "display", _st.max_event)
    )


def display(*objs, include=None, exclude=None, metadata=None, transient=None,
            display_id=None, raw=False, clear=False, **kwargs):
    """IPython-compatible display(): each object becomes a (non-main) result."""
    for obj in objs:
        if raw and isinstance(obj, dict):
            data, md = dict(obj), {}
        else:
            data, md = _bundle(obj, include, exclude)
        if metadata:
            md = dict(md)
            md.update(metadata)
        _publish(data, md, False)
        if _is_figure(obj):
            _close_figure(obj)


def _close_figure(fig):
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        try:
            plt.close(fig)
        except Exception:
            pass


def _plt_show(*args, **kwargs):
    """Replacement for matplotlib.pyplot.show: display and close open figures."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        data, md = _figure_bundle(fig)
        _publish(data, md, False)
        plt.close(fig)


def _flush_figures():
    if "matplotlib.pyplot" in sys.modules:
        _plt_show()


def _patch_module(name, module):
    if name == "matplotlib.pyplot":
        module.show = _plt_show
    elif name == "IPython.core.display_functions":
        module.display = display
    elif name == "subprocess":
        popen = getattr(module, "Popen", None)
        f = getattr(popen, "_execute_child", None)
        if f is not None:
            popen._execute_child = _flushing(f)


class _ImportHook:
    """Meta-path finder that reacts to a few imports without importing them
    itself: MPLBACKEND=Agg before matplotlib loads, and patches pyplot.show /
    IPython's display() / subprocess (flush output before a child starts)
    right after their modules run."""

    names = ("matplotlib", "matplotlib.pyplot", "IPython.core.display_functions", "subprocess")

    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        if name == "matplotlib":
            os.environ.setdefault("MPLBACKEND", "Agg")
            return None
        pf = sys.modules["_frozen_importlib_external"].PathFinder
        spec = pf.find_spec(name, path, target)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig = loader.exec_module

        def exec_module(module, _orig=orig, _name=name):
            _orig(module)
            _patch_module(_name, module)

        loader.exec_module = exec_module
        return spec

    def invalidate_caches(self):
        pass


# ---------------------------------------------------------------- cells


def _register_cells():
    lc = sys.modules.get("linecache")
    if lc is None:
        return
    for fn, src in _st.cells.items():
        if fn not in lc.cache:
            lc.cache[fn] = (len(src), None, src.splitlines(True), fn)


def _send_error(e):
    import traceback
    import linecache  # noqa: F401  (traceback needs it; cells get registered)

    _register_cells()
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _KFILE:
        tb = tb.tb_next
    try:
        text = "".join(traceback.format_exception(type(e), e, tb))
    except Exception:
        text = "%s\n" % type(e).__name__
    try:
        value = str(e)
    except Exception:
        value = "<exception str() failed>"
    _send({"t": "error", "name": type(e).__name__, "value": value, "tb": text})


def _suppressed(src, node):
    """IPython: a trailing ';' after the last expression hides its value."""
    lines = src.splitlines()
    try:
        rest = lines[node.end_lineno - 1].encode("utf-8")[node.end_col_offset:].decode("utf-8", "replace")
    except (IndexError, TypeError):
        return False
    rest = rest.lstrip()
    if rest.startswith(";"):
        return True
    return False


def _run_code(code):
    r = eval(code, _st.ns)
    if code.co_flags & _CO_COROUTINE:
        if _st.loop is None:
            import asyncio

            _st.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(_st.loop)
        r = _st.loop.run_until_complete(r)
    return r


def _exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1


def _exec_cell(count, src):
    import _ast

    fn = "<cell-%d>" % count
    _st.cells[fn] = src
    _register_cells()
    try:
        tree = compile(src, fn, "exec", _ONLY_AST | _FLAGS, dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        _send_error(e)
        return None
    body = tree.body
    last = None
    if body and isinstance(body[-1], _ast.Expr) and not _suppressed(src, body[-1]):
        last = body.pop()
    try:
        if body:
            _run_code(compile(_ast.Module(body=body, type_ignores=[]), fn, "exec", _FLAGS, dont_inherit=True))
        if last is not None:
            v = _run_code(compile(_ast.Expression(body=last.value), fn, "eval", _FLAGS, dont_inherit=True))
            if v is not None:
                _st.ns["_"] = v
                data, md = _bundle(v)
                _publish(data, md, True)
                if _is_figure(v):
                    _close_figure(v)
    except SystemExit as e:
        return _exit_code(e)
    except BaseException as e:
        _send_error(e)
    return None


def _cmd_exec(fields):
    cid, count, src = int(fields[1]), int(fields[2]), fields[3].decode("utf-8", "surrogateescape")
    env = fields[4:]
    saved = {}
    exit_code = None
    _st.busy = True
    try:
        # Tell Go the cell has begun: an interrupt asked for earlier was held
        # back (SIGINT is ignored between cells) and is sent now.
        _send({"t": "start", "id": cid}, sync=False)
        try:
            for i in range(0, len(env) - 1, 2):
                k = env[i].decode("utf-8", "surrogateescape")
                saved[k] = os.environ.get(k)
                os.environ[k] = env[i + 1].decode("utf-8", "surrogateescape")
            exit_code = _exec_cell(count, src)
            try:
                _flush_figures()
            except KeyboardInterrupt:
                raise
            except Exception as e:
                _send_error(e)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    except BaseException as e:  # e.g. KeyboardInterrupt landing in our own code
        try:
            _send_error(e)
        except BaseException:
            pass
    finally:
        _st.busy = False
        _st.pending = False
    _send({"t": "done", "id": cid, "exit": exit_code})


def _valid_name(name):
    import keyword

    return name.isidentifier() and not keyword.iskeyword(name)


def _cmd_get(fields):
    cid, name = int(fields[1]), fields[2].decode("utf-8", "surrogateescape")
    reply = {"t": "reply", "id": cid}
    _st.busy = True
    try:
        if not _valid_name(name):
            reply["err"] = "invalid_name"
        elif name not in _st.ns:
            reply["err"] = "not_found"
        else:
            import json

            v = _st.ns[name]
            try:
                s = json.dumps(v, allow_nan=False)
                key = "json"
            except (TypeError, ValueError, RecursionError):
                s, key = repr(v), "repr"
            if len(s) > _st.max_event:
                reply["err"] = "unsendable: the value is %d bytes, over the limit of %d" % (len(s), _st.max_event)
            else:
                reply[key] = _Raw(s) if key == "json" else s
    except BaseException as e:
        reply = {"t": "reply", "id": cid, "err": "failed: %s: %s" % (type(e).__name__, e)}
    finally:
        _st.busy = False
        _st.pending = False
    try:
        _send(reply)
    except _TooBig:
        _send({"t": "reply", "id": cid, "err": "unsendable: the encoded value is over the limit of %d bytes" % _st.max_event})


def _cmd_set(fields):
    cid, name = int(fields[1]), fields[2].decode("utf-8", "surrogateescape")
    reply = {"t": "reply", "id": cid}
    _st.busy = True
    try:
        if not _valid_name(name):
            reply["err"] = "invalid_name"
        else:
            import json

            try:
                if len(fields) > 4 and fields[4] == b"bytes":
                    _st.ns[name] = bytes(fields[3])
                else:
                    _st.ns[name] = json.loads(fields[3])
            except (ValueError, RecursionError) as e:
                reply["err"] = "unsendable: %s" % e
    except BaseException as e:
        reply = {"t": "reply", "id": cid, "err": "failed: %s: %s" % (type(e).__name__, e)}
    finally:
        _st.busy = False
        _st.pending = False
    _send(reply)


def _on_sigint(signum, frame):
    # Between commands the main loop ignores SIGINT; inside our own frame
    # writes it is deferred until the frame is complete.
    if not _st.busy:
        return
    if _st.crit:
        _st.pending = True
        return
    raise KeyboardInterrupt


def _read_cmd():
    hdr = _read_exact(_CMD_FD, 6)
    if hdr[:2] != _MAGIC:
        raise EOFError
    b = _read_exact(_CMD_FD, int.from_bytes(hdr[2:], "big"))
    fields, i = [], 0
    while i < len(b):
        n = int.from_bytes(b[i:i + 4], "big")
        fields.append(b[i + 4:i + 4 + n])
        i += 4 + n
    return fields


def _main():
    _signal.signal(_signal.SIGINT, _on_sigint)
    hello = _read_cmd()
    _st.token = hello[1]
    _st.max_event = int(hello[2])
    _st.max_frame = int(hello[3])
    # The user's namespace is a fresh __main__ module, not the kernel's globals.
    mod = type(sys)("__main__")
    mod.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = mod
    _st.ns = mod.__dict__
    builtins.display = display
    sys.stdout = _Stream(1, "<stdout>")
    sys.stderr = _Stream(2, "<stderr>")
    sys.argv = [""]
    sys.meta_path.insert(0, _ImportHook())
    for name in ("system", "posix_spawn", "posix_spawnp"):
        f = getattr(os, name, None)
        if f is not None:
            setattr(os, name, _flushing(f))
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_child)
    handlers = {b"exec": _cmd_exec, b"get": _cmd_get, b"set": _cmd_set}
    while True:
        try:
            fields = _read_cmd()
        except EOFError:
            os._exit(0)
        h = handlers.get(fields[0]) if fields else None
        if h is None:
            os._exit(70)
        try:
            h(fields)
        except KeyboardInterrupt:
            pass
        except Exception as e:  # a kernel bug must not end the context
            _note("[kernel] internal error: %s: %s" % (type(e).__name__, e))
