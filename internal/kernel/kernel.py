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
# the frame is processed. That gives one ordered stream. A command's final
# frame (done, or the main result sent with it; reply) is the exception when
# Go offers it in hello: Go writes its markers itself on reading it (mask 4),
# which orders the same bytes before it (nothing of the command follows it)
# and saves the kernel two writes per cell.
#
# A child process (os.system, subprocess, fork, posix_spawn, the context's
# bash/node/R interpreter) writes to fds 1 and 2 directly, unseen, so the
# kernel also syncs where the cell orders a child's output in time: when a
# child starts (after the pending Python-level output), when os.system
# returns, and before every Python-level write while a subprocess.Popen child
# has not been seen finished (returncode still None) or once os.fork or
# posix_spawn made a child (the kernel can't see those end). What stays
# unordered is one child process, or several running at once, writing to
# both fds with no kernel step in between (bash -c 'echo a >&2; echo b'):
# two pipes carry no timestamps, as in Jupyter.
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
    cells = {}  # filename -> source of every cell run, for linecache
    fresh = []  # filenames of the cells linecache hasn't been given yet
    ns = None
    child = None  # _Child running the cells of a non-Python context
    kids = []  # subprocess.Popen objects started and not seen finished
    forked = False  # os.fork/posix_spawn made a child we can't see finish
    held = None  # (data, md): the cell's main result, sent with its done frame
    go_marks = False  # Go writes the sync markers of a command's final frame
    wait_cpus = None  # {the agent's CPU}: where the main thread waits for commands


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


# JSON strings for frames: _json's encode_basestring_ascii, byte for byte.
# _json is a C extension whose load (~1.2 ms) would be on a cold start's
# critical path (the kernel's start is its longest step): _jstr is this
# module's own until the first command has been answered (_main loads _json
# then), or until a string its pure path won't take.
_JESC = {i: "\\u%04x" % i for i in (*range(32), 127)}
_JESC.update({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r", 34: '\\"', 92: "\\\\"})
_JSLOW_MAX = 4096  # longer strings needing escapes go to _json


def _jstr_c():
    """Load _json's encoder as _jstr, and return it."""
    global _jstr
    from _json import encode_basestring_ascii as _jstr

    return _jstr


def _jstr(s):
    if s.isascii():
        if s.isprintable() and '"' not in s and "\\" not in s:
            return '"' + s + '"'
        if len(s) <= _JSLOW_MAX:
            return '"' + s.translate(_JESC) + '"'
    return _jstr_c()(s)


_jstr_py = _jstr


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
    # Lists, not generators, for join: it makes a list of them anyway.
    if isinstance(o, dict):
        return "{" + ",".join([_jstr(str(k)) + ":" + _enc(v) for k, v in o.items()]) + "}"
    if isinstance(o, (list, tuple)):
        return "[" + ",".join([_enc(v) for v in o]) + "]"
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


def _send(obj, sync=True, then=None, final=False):
    """Send one event frame. Safe against SIGINT: an interrupt arriving in
    the middle is deferred so a frame is never cut in half. sync=False sends
    no pipe markers (mask 0): for frames that order nothing, such as "start",
    Go then need not wait on the output pipes. then: a second frame sent in
    the same write, after the first and ordered by its markers (mask 0): a
    cell's main result and its "done" cost one write and one set of markers,
    not two. final: the command's last frame, which none of its output
    follows; when Go offered it (hello), Go writes this frame's markers
    itself on reading it (mask 4, a fresh epoch): the pipes are FIFOs, so
    everything written to them before still comes first, and the cell costs
    two writes fewer."""
    body = _enc(obj)
    if len(body) + 64 > _st.max_frame:
        raise _TooBig(len(body))
    body2 = _enc(then) if then is not None else None
    main = _thread.get_ident() == _MAIN_THREAD
    with _lock:
        if main:
            _st.crit = True
        try:
            if _st.buf:
                _flush_locked(False)
            if final and _st.go_marks:
                _st.epoch += 1
                mask = 4
            else:
                mask = _marker_locked() if sync else 0
            payload = ('{"e":%d,"m":%d,%s' % (_st.epoch, mask, body[1:])).encode()
            data = _MAGIC + len(payload).to_bytes(4, "big") + payload
            if body2 is not None:
                p2 = ('{"e":%d,"m":0,%s' % (_st.epoch, body2[1:])).encode()
                data += _MAGIC + len(p2).to_bytes(4, "big") + p2
            _write_all(_EVT_FD, data)
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
    if _st.kids or _st.forked:
        # A child may have written to the other pipe since the last sync
        # point: only a marker orders that before this write. A finished
        # Popen is forgotten only after this sync, which follows its output.
        _sync_locked(main)
        _st.kids = [p for p in _st.kids if getattr(p, "returncode", 0) is None]
    elif _st.last is not None and _st.last != which:
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
    _line_write(which, data, main)
    if main and _st.pending:
        _st.pending = False
        if _st.busy:
            raise KeyboardInterrupt


def _line_write(which, data, main):
    """Write data to stream which, line-buffered: complete lines now, a
    partial line when it is complete or after _FLUSH_DELAY."""
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


def _chunk(which, data):
    """Write data to stream which (1 or 2) as one output chunk of its own:
    the marker after it ends the chunk there, so Go never joins it with
    the next (E2B's Java kernel sends each write as a message)."""
    main = _thread.get_ident() == _MAIN_THREAD
    with _lock:
        if _st.buf:
            _flush_locked(main)
        _out_locked(which, data, main)
        _sync_locked(main)
        _st.last = None


def _child_sync(main=None):
    """A sync point for a child process starting or ending: write pending
    Python-level output, then mark both pipes. A child writes to fds 1 and 2
    directly, so without the marker Go can't tell whether its output on one
    pipe came before or after earlier output on the other (see the top)."""
    if main is None:
        main = _thread.get_ident() == _MAIN_THREAD
    with _lock:
        if _st.buf:
            _flush_locked(main)
        _sync_locked(main)
        _st.last = None


def _before_fork():
    # Write pending output so the child can't print it again, and mark the
    # pipes so the child's output comes after it. _lock is not held across
    # the fork: Python 3.12 warns about forking with threads (the flusher)
    # before running the after-fork hooks, and that warning is written to
    # sys.stderr.
    try:
        _child_sync(_thread.get_ident() == _MAIN_THREAD)
    except Exception:
        pass


def _after_fork_parent():
    # The kernel can't see when a forked child ends: from now on every
    # Python-level write is a sync point (see _out_locked).
    _st.forked = True


def _after_fork_child():
    # Only the forking thread exists in the child: another thread may have
    # held _lock or left a partial line at the moment of the fork.
    global _lock
    _lock = _thread.allocate_lock()
    _st.buf.clear()
    _st.armed = False
    _st.kids = []
    _st.forked = False


def _quiet_sync():
    try:
        _child_sync()
    except (OSError, _TooBig):  # the event pipe is gone: Go reports that
        pass


def _flushing(f, after=None):
    """Wrap f (which starts a child process) to write pending output and
    mark the pipes first; after(args, result) runs when f returns."""

    def wrapper(*args, **kwargs):
        _quiet_sync()
        if _st.pending and _thread.get_ident() == _MAIN_THREAD:
            _st.pending = False  # an interrupt deferred during the sync
            if _st.busy:
                raise KeyboardInterrupt
        r = f(*args, **kwargs)
        if after is not None:
            after(args, r)
        return r

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
    data = {"image/png": buf.getvalue(), "text/plain": repr(fig)}
    # After savefig: the figure is drawn, so tick labels have their text.
    try:
        chart = _chart_of_figure(fig)
    except Exception as e:  # a chart is a bonus; the PNG is the result
        _note("[display] no chart data for this figure: %s: %s" % (type(e).__name__, e))
        chart = None
    if chart is not None:
        data["e2b/chart"] = chart
    return data, {}


# ---------------------------------------------------------------- charts
#
# E2B's chart JSON (the code interpreter SDK's Chart types) read from a drawn
# matplotlib figure: one axes gives a line, scatter, bar, pie or
# box_and_whisker chart (or "unknown" with just its title), several give a
# superchart of them. Only public matplotlib API, plus the figure's suptitle.


def _jnum(v):
    """A JSON-safe number: numpy scalars to Python, NaN/inf to None."""
    if isinstance(v, (bool, int)):
        return v
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if f != f or f in (float("inf"), float("-inf")):
        return None
    return f


def _axis_scale(ax, which):
    axis = ax.xaxis if which == "x" else ax.yaxis
    get = getattr(axis, "get_converter", None)
    conv = get() if get is not None else getattr(axis, "converter", None)
    mod = type(conv).__module__ if conv is not None else ""
    if mod == "matplotlib.dates":
        return "datetime"
    if mod == "matplotlib.category":
        return "categorical"
    scale = ax.get_xscale() if which == "x" else ax.get_yscale()
    return scale if scale in ("linear", "log", "symlog", "logit", "function", "functionlog", "asinh") else "linear"


def _axis_value(v, scale, cats=None):
    """A plotted (converted) value as E2B shows it: ISO dates on a datetime
    axis, the category on a categorical one, else the number."""
    if scale == "datetime":
        from matplotlib.dates import num2date

        try:
            return num2date(float(v)).isoformat()
        except (TypeError, ValueError, OverflowError):
            return None
    if scale == "categorical" and cats is not None:
        try:
            i = int(round(float(v)))
        except (TypeError, ValueError):
            return None
        if 0 <= i < len(cats) and abs(float(v) - i) < 1e-9:
            return cats[i]
    return _jnum(v)


def _categories(ax, which):
    axis = ax.xaxis if which == "x" else ax.yaxis
    units = getattr(axis, "units", None)
    mapping = getattr(units, "_mapping", None)  # category.UnitData: label -> position
    if not mapping:
        return None
    cats = [None] * len(mapping)
    for label, pos in mapping.items():
        if 0 <= int(pos) < len(cats):
            cats[int(pos)] = label.decode() if isinstance(label, bytes) else str(label)
    return cats


def _label_and_unit(text):
    """'Time (s)' -> ('Time (s)', 's'): the unit is the last (...) or [...]."""
    import re

    if not text:
        return None, None
    m = re.search(r"[\(\[]([^()\[\]]+)[\)\]]\s*$", text)
    return text, (m.group(1).strip() if m else None)


def _chart_base(ax, typ):
    return {"type": typ, "title": ax.get_title() or None, "elements": []}


def _chart_2d(ax, typ):
    c = _chart_base(ax, typ)
    c["x_label"], c["x_unit"] = _label_and_unit(ax.get_xlabel())
    c["y_label"], c["y_unit"] = _label_and_unit(ax.get_ylabel())
    return c


def _chart_points(ax, typ):
    c = _chart_2d(ax, typ)
    for w in ("x", "y"):
        scale = _axis_scale(ax, w)
        cats = _categories(ax, w) if scale == "categorical" else None
        ticks = ax.get_xticks() if w == "x" else ax.get_yticks()
        labels = ax.get_xticklabels() if w == "x" else ax.get_yticklabels()
        c[w + "_scale"] = scale
        c[w + "_ticks"] = [_axis_value(t, scale, cats) for t in ticks]
        c[w + "_tick_labels"] = [t.get_text() for t in labels]
        c["_" + w] = (scale, cats)
    return c


def _points(c, xs, ys):
    (sx, cx), (sy, cy) = c["_x"], c["_y"]
    return [[_axis_value(x, sx, cx), _axis_value(y, sy, cy)] for x, y in zip(xs, ys)]


def _tick_label_at(ax, which, pos):
    ticks = ax.get_xticks() if which == "x" else ax.get_yticks()
    labels = ax.get_xticklabels() if which == "x" else ax.get_yticklabels()
    for t, lab in zip(ticks, labels):
        if abs(float(t) - pos) < 1e-6 * max(1.0, abs(pos)):
            return lab.get_text()
    v = _jnum(pos)
    return str(v)


def _kinds(ax):
    """The data artists of ax (text, legends, grid lines and spines aside)."""
    return list(ax.lines) + list(ax.collections) + list(ax.patches) + list(ax.images) + list(ax.tables) + list(ax.artists)


def _isa(a, name):
    """isinstance by class name: no matplotlib import needed to classify."""
    return any(k.__name__ == name for k in type(a).__mro__)


def _chart_type(ax):
    arts = _kinds(ax)
    if not arts:
        return None
    if all(_isa(a, "Line2D") for a in arts):
        return "line"
    if all(_isa(a, "Line2D") or _isa(a, "PathPatch") for a in arts):
        return "box_and_whisker"
    if all(_isa(a, "PathCollection") for a in arts):
        return "scatter"
    if all(_isa(a, "Wedge") for a in arts):
        return "pie"
    if all(type(a).__name__ == "Rectangle" for a in arts):
        return "bar"
    return "unknown"


def _chart_of_ax(ax):
    typ = _chart_type(ax)
    if typ is None:
        return None
    if typ == "line":
        c = _chart_points(ax, "line")
        for ln in ax.lines:
            c["elements"].append({"label": ln.get_label(), "points": _points(c, ln.get_xdata(orig=False), ln.get_ydata(orig=False))})
    elif typ == "scatter":
        c = _chart_points(ax, "scatter")
        for col in ax.collections:
            off = col.get_offsets()
            c["elements"].append({"label": col.get_label(), "points": _points(c, [p[0] for p in off], [p[1] for p in off])})
    elif typ == "bar":
        c = _chart_2d(ax, "bar")
        seen = set()
        for cont in getattr(ax, "containers", []):
            if type(cont).__name__ != "BarContainer":
                continue
            group = cont.get_label() or ""
            horiz = getattr(cont, "orientation", "vertical") == "horizontal"
            for p in cont.patches:
                seen.add(id(p))
                c["elements"].append(_bar(ax, p, group, horiz))
        for p in ax.patches:
            if id(p) not in seen:
                c["elements"].append(_bar(ax, p, "", False))
    elif typ == "pie":
        c = _chart_base(ax, "pie")
        for w in ax.patches:
            c["elements"].append({"label": w.get_label(), "angle": round(abs(w.theta2 - w.theta1), 4), "radius": _jnum(w.r)})
    elif typ == "box_and_whisker":
        c = _chart_2d(ax, "box_and_whisker")
        c["elements"] = _boxes(ax)
    else:
        c = _chart_base(ax, "unknown")
    for k in ("_x", "_y"):
        c.pop(k, None)
    return c


def _bar(ax, p, group, horiz):
    if horiz:
        pos, value = p.get_y() + p.get_height() / 2, p.get_width()
        label = _tick_label_at(ax, "y", pos)
    else:
        pos, value = p.get_x() + p.get_width() / 2, p.get_height()
        label = _tick_label_at(ax, "x", pos)
    return {"label": label, "value": _jnum(value), "group": group}


def _boxes(ax):
    """Box plots drawn with patch_artist=True: a PathPatch per box (q1..q3),
    Line2Ds for median, whiskers, caps and fliers within its x range."""
    out = []
    boxes = [p for p in ax.patches if _isa(p, "PathPatch")]
    spans = []
    for b in boxes:
        vs = b.get_path().vertices
        xs = [float(v[0]) for v in vs]
        ys = [float(v[1]) for v in vs]
        spans.append((min(xs), max(xs), min(ys), max(ys)))
    order = sorted(range(len(boxes)), key=lambda i: spans[i][0])
    for i in order:
        x0, x1, q1, q3 = spans[i]
        eps = 1e-9 * max(1.0, abs(x1 - x0))
        lo, hi, med, outliers = q1, q3, None, []
        for ln in ax.lines:
            xd = [float(v) for v in ln.get_xdata(orig=False)]
            yd = [float(v) for v in ln.get_ydata(orig=False)]
            if not xd or min(xd) < x0 - eps or max(xd) > x1 + eps:
                continue
            if ln.get_linestyle() in ("None", "", " "):
                outliers.extend(_jnum(y) for y in yd)
                continue
            if len(set(xd)) == 1:  # a whisker
                lo, hi = min(lo, min(yd)), max(hi, max(yd))
            elif len(set(yd)) == 1 and q1 <= yd[0] <= q3 and abs(min(xd) - x0) <= eps and abs(max(xd) - x1) <= eps:
                med = yd[0]
        center = (x0 + x1) / 2
        out.append({"label": _tick_label_at(ax, "x", center), "min": _jnum(lo), "first_quartile": _jnum(q1),
                    "median": _jnum(med), "third_quartile": _jnum(q3), "max": _jnum(hi), "outliers": outliers})
    return out


def _chart_of_figure(fig):
    axes = [ax for ax in fig.get_axes() if ax.has_data()]
    if not axes:
        return None  # a blank figure has no chart
    if len(fig.get_axes()) > 1:
        sup = getattr(fig, "_suptitle", None)
        title = sup.get_text() if sup is not None else None
        return {"type": "superchart", "title": title or None,
                "elements": [c for c in (_chart_of_ax(ax) for ax in fig.get_axes()) if c is not None]}
    return _chart_of_ax(axes[0])


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
    pd = sys.modules.get("pandas")
    if pd is not None and "e2b/data" not in data and isinstance(obj, pd.DataFrame):
        try:
            data["e2b/data"] = _frame_data(obj, pd)
        except Exception as e:
            _repr_warn(obj, "to_dict", e)
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


def _frame_data(df, pd):
    """E2B's Result.data for a DataFrame: {column: [values]}, timestamps as
    ISO strings, NaN as null, numpy scalars as plain numbers."""

    def cell(v):
        if isinstance(v, pd.Timestamp):
            return v.isoformat()
        if v is None or isinstance(v, (str, bool)):
            return v
        if isinstance(v, (int, float)) or type(v).__module__ == "numpy":
            n = _jnum(v)
            if n is not None or not hasattr(v, "item"):
                return n
            return None
        try:
            if pd.isna(v):
                return None
        except (TypeError, ValueError):
            pass
        return str(v)

    return {str(k): [cell(v) for v in vs] for k, vs in df.to_dict(orient="list").items()}


def _publish(data, md, main, then=None, final=False):
    """Encode a MIME bundle and send it, unless it is too big for one event;
    then (a frame) is sent after it either way. final: then is the
    command's final frame (see _send)."""
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
            _send(_Raw('{"t":"display","main":%s,"data":%s,"md":%s}' % ("true" if main else "false", _enc(out), _enc(md))),
                  then=then, final=final)
            return
        except _TooBig:
            pass
    _note(
        "[display output dropped: the %s payload is over the limit of %d bytes per event]"
        % ("main result" if main else "display", _st.max_event)
    )
    if then is not None:
        _send(then, final=final)


def _release_held():
    """Publish a main result held back for the cell's done frame now (an
    error is about to be sent, which must come after it)."""
    held, _st.held = _st.held, None
    if held is not None:
        _publish(held[0], held[1], True)


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
    elif name == "PIL.ImageShow":
        # Image.show() displays the image as a result (E2B's too), ahead of
        # any desktop viewer, which a sandbox has no screen for.
        try:
            module.register(_PILViewer(), -1)
        except Exception:
            pass
    elif name == "PIL.Image":
        # E2B's code interpreter shows an image saved to a path as a result.
        img = getattr(module, "Image", None)
        save = getattr(img, "save", None)
        if save is not None and not getattr(save, "_cs_wrapped", False):
            def saving(self, fp, *args, _save=save, **kwargs):
                r = _save(self, fp, *args, **kwargs)
                # The user's own save only: a library that writes through
                # PIL (matplotlib's savefig does) has its own display rules.
                caller = sys._getframe(1).f_globals.get("__name__", "")
                if isinstance(fp, (str, os.PathLike)) and not caller.startswith(("matplotlib", "PIL")):
                    display(self)
                return r

            saving._cs_wrapped = True
            img.save = saving
    elif name == "subprocess":
        popen = getattr(module, "Popen", None)
        f = getattr(popen, "_execute_child", None)
        if f is not None:
            popen._execute_child = _flushing(f, _started_popen)


def _started_popen(args, _r):
    """A Popen child runs in the background: until it is seen finished, every
    Python-level write is a sync point (see _out_locked)."""
    with _lock:
        if len(_st.kids) >= 64:  # never seen finished: stop tracking, bound the list
            _st.kids = []
            _st.forked = True
        elif args:
            _st.kids.append(args[0])


def _ended_child(_args, _r):
    # os.system returned: the child's output is all in the pipes; mark them
    # so what the cell writes next comes after it.
    _quiet_sync()


def _spawned_child(_args, _r):
    _st.forked = True


class _PILViewer:
    """A PIL.ImageShow viewer that displays the image as a result."""

    format = "PNG"

    def show(self, image, **options):
        display(image)
        return 1


# ---------------------------------------------------------------- tools
#
# "Code mode": `import tools` gives one function per tool the host granted
# this sandbox (internal/agent/tools.go). A call is one JSON line over the
# agent's unix socket, whose path is in $CODE_SANDBOXES_TOOLS_SOCKET; the
# agent checks the name against the grant and bounds the call. Keyword
# arguments are checked here against the tool's JSON schema first, so a
# wrong call fails with a clear TypeError/ValueError before it leaves.

_TOOLS_ENV = "CODE_SANDBOXES_TOOLS_SOCKET"
_TOOLS_MAX_ARGS = 1 << 20
_TOOLS_MAX_ANSWER = (4 << 20) + (64 << 10)


def _tools_spec():
    p = os.environ.get(_TOOLS_ENV)
    if not p or not os.path.exists(p):
        return None  # no tools granted: a tools module of the user's may load
    return sys.modules["_frozen_importlib"].ModuleSpec("tools", _ToolsLoader(), origin="code-sandboxes")


class _ToolsLoader:
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        _tools_build(module)


class _ToolsErrors:
    cls = None


def _tools_errors():
    if _ToolsErrors.cls is None:

        class ToolError(Exception):
            """A granted tool failed, or its call was refused; str() is the message."""

        class ToolTimeout(ToolError, TimeoutError):
            """The tool did not answer within its timeout."""

        class ToolUnavailable(ToolError, ConnectionError):
            """No host serves the tools now (the program that granted them is gone)."""

        for c in (ToolError, ToolTimeout, ToolUnavailable):
            c.__module__ = "tools"
            c.__qualname__ = c.__name__
        _ToolsErrors.cls = (ToolError, ToolTimeout, ToolUnavailable)
    return _ToolsErrors.cls


def _tools_rpc(req):
    import json
    import socket

    ToolError, ToolTimeout, ToolUnavailable = _tools_errors()
    data = json.dumps(req, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n"
    if len(data) > _TOOLS_MAX_ARGS + 1024:
        raise ValueError("tool arguments are %d bytes as JSON, over the limit of %d" % (len(data), _TOOLS_MAX_ARGS))
    path = os.environ.get(_TOOLS_ENV) or ""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            s.connect(path)
        except OSError as e:
            raise ToolUnavailable("the tools socket is unreachable (%s): no tools are granted now" % e) from None
        try:
            s.sendall(data)
        except OSError:
            pass  # the agent may have refused before reading: its answer says why
        buf = bytearray()
        while not buf.endswith(b"\n"):
            try:
                chunk = s.recv(1 << 16)
            except OSError as e:
                raise ToolUnavailable("the tool call's connection failed: %s" % e) from None
            if not chunk:
                break
            buf += chunk
            if len(buf) > _TOOLS_MAX_ANSWER:
                raise ToolError("the tool's answer is over the limit of %d bytes" % _TOOLS_MAX_ANSWER)
    finally:
        s.close()
    if not buf:
        raise ToolUnavailable("the agent closed the tool call without an answer")
    return json.loads(bytes(buf))


def _tools_call(name, kwargs):
    ToolError, ToolTimeout, ToolUnavailable = _tools_errors()
    ans = _tools_rpc({"tool": name, "args": kwargs})
    err = ans.get("error")
    if err is not None:
        kind = ans.get("kind")
        cls = {"timeout": ToolTimeout, "unavailable": ToolUnavailable}.get(kind, ToolError)
        raise cls(err)
    return ans.get("result")


_JSON_TYPES = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def _tools_check(schema, v, where):
    """A small JSON Schema checker: type, enum, const, properties, required,
    additionalProperties, items, minimum/maximum, minLength/maxLength."""
    if not isinstance(schema, dict):
        return
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        ok = False
        for one in types:
            py = _JSON_TYPES.get(one)
            if py is None:
                ok = True  # a type we don't know: let the tool judge
                break
            if isinstance(v, bool) and one in ("integer", "number"):
                continue
            if one == "integer" and isinstance(v, float) and v.is_integer():
                ok = True
                break
            if isinstance(v, py):
                ok = True
                break
        if not ok:
            raise TypeError("%s must be %s, not %s" % (where, " or ".join(types), type(v).__name__))
    if "enum" in schema and v not in schema["enum"]:
        raise ValueError("%s must be one of %r, not %r" % (where, schema["enum"], v))
    if "const" in schema and v != schema["const"]:
        raise ValueError("%s must be %r, not %r" % (where, schema["const"], v))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in schema and v < schema["minimum"]:
            raise ValueError("%s must be >= %r, not %r" % (where, schema["minimum"], v))
        if "maximum" in schema and v > schema["maximum"]:
            raise ValueError("%s must be <= %r, not %r" % (where, schema["maximum"], v))
    if isinstance(v, str):
        if "minLength" in schema and len(v) < schema["minLength"]:
            raise ValueError("%s must be at least %d characters" % (where, schema["minLength"]))
        if "maxLength" in schema and len(v) > schema["maxLength"]:
            raise ValueError("%s must be at most %d characters" % (where, schema["maxLength"]))
    if isinstance(v, dict):
        _tools_check_object(schema, v, where)
    if isinstance(v, (list, tuple)) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(v):
            _tools_check(schema["items"], item, "%s[%d]" % (where, i))


def _tools_check_object(schema, v, where, top=False):
    props = schema.get("properties") or {}
    for k in schema.get("required") or ():
        if k not in v:
            raise TypeError("%s: missing required argument %r" % (where, k))
    # Unknown keyword arguments are refused when the schema names its
    # properties (a typo must not pass silently) unless it opens them.
    extra = schema.get("additionalProperties", not (top and "properties" in schema))
    for k, item in v.items():
        if not isinstance(k, str):
            raise TypeError("%s: keys must be strings, not %r" % (where, k))
        if k in props:
            _tools_check(props[k], item, "%s: argument %r" % (where, k) if top else "%s[%r]" % (where, k))
        elif extra is False:
            known = ", ".join(sorted(props)) or "none"
            raise TypeError("%s: unexpected argument %r (known: %s)" % (where, k, known))
        elif isinstance(extra, dict):
            _tools_check(extra, item, "%s[%r]" % (where, k))


def _tools_func(spec):
    name = spec["name"]
    schema = spec.get("input_schema") or {}
    props = schema.get("properties") or {} if isinstance(schema, dict) else {}
    required = set(schema.get("required") or ()) if isinstance(schema, dict) else set()

    def tool(*args, **kwargs):
        if args:
            raise TypeError("tools.%s() takes keyword arguments only (%s)" % (name, ", ".join(props) or "none"))
        if isinstance(schema, dict):
            # Unknown names are refused unless the schema opens them.
            _tools_check_object(schema, kwargs, "tools.%s()" % name, top=True)
        return _tools_call(name, kwargs)

    tool.__name__ = tool.__qualname__ = name
    tool.__module__ = "tools"
    lines = [spec.get("description") or "", ""]
    for k, p in props.items():
        p = p if isinstance(p, dict) else {}
        t = p.get("type", "any")
        t = " | ".join(t) if isinstance(t, list) else t
        opt = "" if k in required else ", optional"
        desc = p.get("description")
        lines.append("%s (%s%s)%s" % (k, t, opt, ": " + desc if desc else ""))
    tool.__doc__ = "\n".join(lines).strip()
    try:
        import inspect

        params = []
        for k in props:
            if not k.isidentifier():
                continue
            d = inspect.Parameter.empty if k in required else None
            params.append(inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=d))
        addl = schema.get("additionalProperties") if isinstance(schema, dict) else None
        if (not props and addl is not False) or addl not in (None, False):
            params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
        params.sort(key=lambda p: (p.kind, p.default is not inspect.Parameter.empty))
        tool.__signature__ = inspect.Signature(params)
    except Exception:
        pass
    return tool


def _tools_build(module):
    ToolError, ToolTimeout, ToolUnavailable = _tools_errors()
    ns = module.__dict__
    ns["__doc__"] = ("Tools granted to this sandbox by its host. Call them with keyword arguments, "
                     "e.g. tools.name(arg=1); results come back decoded from JSON; a failure raises "
                     "tools.ToolError (tools.ToolTimeout on timeout). names() lists them, "
                     "describe() shows their signatures.")
    ns["ToolError"] = ToolError
    ns["ToolTimeout"] = ToolTimeout
    ns["ToolUnavailable"] = ToolUnavailable
    granted = {}

    def refresh():
        ans = _tools_rpc({"list": True})
        for old in list(granted):
            ns.pop(old, None)
        granted.clear()
        for spec in ans.get("tools") or ():
            f = _tools_func(spec)
            granted[spec["name"]] = f
            ns[spec["name"]] = f

    def names():
        """The names of the granted tools (asks the agent again)."""
        refresh()
        return sorted(granted)

    def describe():
        """Every granted tool's signature and docstring, as text."""
        import inspect

        refresh()
        out = []
        for n in sorted(granted):
            f = granted[n]
            try:
                sig = str(inspect.signature(f))
            except Exception:
                sig = "(**kwargs)"
            out.append("tools.%s%s\n    %s" % (n, sig, (f.__doc__ or "").replace("\n", "\n    ")))
        return "\n\n".join(out)

    def call(*args, **kwargs):
        """call(name, **kwargs): call a tool by name (as tools.<name>(**kwargs))."""
        if len(args) != 1 or not isinstance(args[0], str):
            raise TypeError("tools.call(name, **kwargs): give the tool's name, then its keyword arguments")
        name = args[0]
        f = granted.get(name)
        if f is None:
            refresh()
            f = granted.get(name)
        if f is None:
            return _tools_call(name, kwargs)  # the agent says why it is refused
        return f(**kwargs)

    def __getattr__(attr):
        # A tool granted after the import shows up on first use.
        if not attr.startswith("_"):
            refresh()
            if attr in granted:
                return granted[attr]
        raise AttributeError("module 'tools' has no attribute %r (granted tools: %s)" % (attr, ", ".join(sorted(granted)) or "none"))

    ns["names"] = names
    ns["describe"] = describe
    ns["call"] = call
    ns["__getattr__"] = __getattr__
    ns["__all__"] = []
    refresh()
    ns["__all__"] = sorted(granted)


class _UserSiteFinder:
    """Last on sys.meta_path: a top-level import nothing else found may be
    of a package pip put in the user's site (~/.local/...) after the kernel
    started: `pip install` in a command, as E2B's users write it. site adds
    that directory only if it exists at start-up, and a sandbox's fresh home
    has none. Once it exists, it is added (with its .pth files, where site
    would have put it) and the import looks again. The failed imports before
    cost a stat each."""

    done = False

    def find_spec(self, name, path=None, target=None):
        if path is not None or self.done:
            return None
        import site

        if not site.ENABLE_USER_SITE:
            self.done = True
            return None
        usersite = site.getusersitepackages()
        if usersite in sys.path or not os.path.isdir(usersite):
            return None
        self.done = True
        site.addsitedir(usersite)
        try:
            sys.path.remove(usersite)
        except ValueError:
            pass
        at = next((i for i, p in enumerate(sys.path) if p.endswith(("site-packages", "dist-packages"))), len(sys.path))
        sys.path.insert(at, usersite)
        sys.path_importer_cache.pop(usersite, None)
        return sys.modules["_frozen_importlib_external"].PathFinder.find_spec(name, None, target)

    def invalidate_caches(self):
        pass


class _ImportHook:
    """Meta-path finder that reacts to a few imports without importing them
    itself: MPLBACKEND=Agg before matplotlib loads, and patches pyplot.show /
    IPython's display() / subprocess (flush output before a child starts)
    right after their modules run."""

    names = ("matplotlib", "matplotlib.pyplot", "IPython.core.display_functions", "subprocess", "PIL.Image", "PIL.ImageShow")

    def find_spec(self, name, path=None, target=None):
        if name == "tools" and path is None:
            return _tools_spec()
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


# ---------------------------------------------------------------- IPython
#
# Cells get IPython's input transforms without IPython: the first line's
# indentation is removed from every line (a cell copied out of a block), and
# at the start of a logical line `!cmd`, `!!cmd`, `x = !cmd`, `%magic args`,
# `x = %magic args` and, on the first line, `%%magic args` become calls on
# __cs__ (the same object get_ipython() returns, so code exported from a
# notebook as get_ipython().system(...) runs too). Each transformed line stays
# one line, so tracebacks keep the cell's line numbers.


def _maybe_magic(src):
    """Cheap pre-check: can _transform change src at all?"""
    if "!" in src or "%" in src:
        return True
    for line in src.splitlines():
        if line.strip():
            return line[0] in " \t"
    return False


def _transform(src):
    import re

    lines = src.splitlines(True)
    first = 0
    while first < len(lines) and not lines[first].strip():
        first += 1
    if first == len(lines):
        return src
    ind = re.match(r"[ \t]*", lines[first]).group(0)
    if ind:
        n = len(ind)
        lines = [l[n:] if l.startswith(ind) else l for l in lines]
    head = lines[first].rstrip("\r\n")
    if head.startswith("%%"):
        name, args = (re.split(r"\s+", head[2:].strip(), 1) + [""])[:2]
        body = "".join(lines[first + 1:])
        return "\n" * first + "__cs__.cell_magic(%r, %r, %r)\n" % (name, args, body)
    if not re.search(r"(?m)^[ \t]*(?:[\w.]+(?:[ \t]*,[ \t]*[\w.]+)*[ \t]*=[ \t]*)?[!%]", "".join(lines)):
        return "".join(lines)
    assign = re.compile(r"([ \t]*)([\w.]+(?:[ \t]*,[ \t]*[\w.]+)*)[ \t]*=[ \t]*([!%])(.*)$", re.S)
    st = [0, None, False]  # bracket depth, open string quote, backslash continuation
    out = []
    for line in lines:
        if st[0] == 0 and st[1] is None and not st[2]:
            t = _escape_line(line, assign)
            if t is not None:
                out.append(t)
                continue
        _scan(line, st)
        out.append(line)
    return "".join(out)


def _escape_line(line, assign):
    body = line.rstrip("\r\n")
    nl = line[len(body):]
    text = body.lstrip(" \t")
    ind = body[: len(body) - len(text)]
    if text.startswith("!!"):
        return "%s__cs__.getoutput(%r)%s" % (ind, text[2:], nl)
    if text.startswith("!"):
        return "%s__cs__.system(%r)%s" % (ind, text[1:], nl)
    if text.startswith("%") and not text.startswith("%%") and len(text) > 1:
        name, _, args = text[1:].partition(" ")
        return "%s__cs__.line_magic(%r, %r)%s" % (ind, name, args.strip(), nl)
    m = assign.match(body)
    if m is None:
        return None
    ind, lhs, esc, rest = m.groups()
    if esc == "!":
        return "%s%s = __cs__.getoutput(%r)%s" % (ind, lhs, rest, nl)
    if rest.startswith("%") or not rest[:1].isidentifier():
        return None
    name, _, args = rest.partition(" ")
    return "%s%s = __cs__.line_magic(%r, %r)%s" % (ind, lhs, name, args.strip(), nl)


def _scan(line, st):
    """Advance the tokenizer state st over one line of Python: enough to tell
    whether the next line starts a logical line (not inside brackets, a
    string or a backslash continuation)."""
    depth, q = st[0], st[1]
    i, n = 0, len(line)
    comment = False
    while i < n:
        c = line[i]
        if q:
            if c == "\\":
                i += 2
            elif line.startswith(q, i):
                i += len(q)
                q = None
            else:
                i += 1
            continue
        if c == "#":
            comment = True
            break
        if c == "'" or c == '"':
            q = c * 3 if line.startswith(c * 3, i) else c
            i += len(q)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        i += 1
    body = line.rstrip("\r\n")
    if q is not None and len(q) == 1 and not body.endswith("\\"):
        q = None  # unterminated one-line string: a syntax error, not our business
    st[0], st[1] = depth, q
    st[2] = q is None and not comment and body.endswith("\\")


class SList(list):
    """What x = !cmd gives: the output's lines, as IPython's SList."""

    s = property(lambda self: " ".join(self), doc="lines joined by spaces")
    spstr = s
    n = property(lambda self: "\n".join(self), doc="lines joined by newlines")
    nlstr = n
    l = property(lambda self: list(self), doc="a plain list")
    list = l


class UsageError(Exception):
    """A magic was misused or does not exist (IPython's name)."""


def _fmt_time(t):
    if t >= 1:
        return "%.3g s" % t
    for unit, f in (("ms", 1e3), ("µs", 1e6)):
        if t * f >= 1:
            return "%.3g %s" % (t * f, unit)
    return "%.3g ns" % (t * 1e9)


class _Shell:
    """The object behind !, % and %% (and get_ipython()): IPython's magics
    that cells pasted from notebooks use, on the stdlib."""

    def __init__(self):
        self._oldpwd = None

    @property
    def user_ns(self):
        return _st.ns

    def _ns(self, depth):
        f = sys._getframe(depth + 1)
        ns = dict(f.f_globals)
        if f.f_locals is not f.f_globals:
            ns.update(f.f_locals)
        return ns

    def var_expand(self, cmd, ns=None, depth=1):
        """$name and {expr} from the caller's variables, $$ and {{ }} for
        literal ones; the command unchanged if an expression fails (as IPython)."""
        import re

        if ns is None:
            ns = self._ns(depth)

        def rep(m):
            t = m.group(0)
            if t in ("$$", "{{", "}}"):
                return t[0]
            if m.group(1) is not None:
                return str(ns[m.group(1)]) if m.group(1) in ns else t
            return str(eval(m.group(2), ns))

        try:
            return re.sub(r"\$\$|\$([A-Za-z_]\w*)|\{\{|\}\}|\{([^{}]*)\}", rep, cmd)
        except Exception:
            return cmd

    def _shell(self):
        sh = os.environ.get("SHELL")
        if not sh or not os.path.exists(sh):
            sh = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        return sh

    def system(self, cmd, expand=True):
        """!cmd: run in the shell, output streamed; its status in _exit_code."""
        import subprocess

        rc = subprocess.call(self.var_expand(cmd, depth=2) if expand else cmd, shell=True,
                             executable=self._shell())
        _st.ns["_exit_code"] = rc
        return None

    def getoutput(self, cmd, split=True, expand=True):
        """x = !cmd: stdout and stderr together, as an SList of lines."""
        import subprocess

        if expand:
            cmd = self.var_expand(cmd, depth=2)
        p = subprocess.run(cmd, shell=True, executable=self._shell(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _st.ns["_exit_code"] = p.returncode
        text = p.stdout.decode("utf-8", "replace")
        return SList(text.splitlines()) if split else text

    def run_line_magic(self, name, line, _stack_depth=1):
        f = getattr(self, "_m_" + name, None)
        if f is None:
            raise UsageError("Line magic function `%%%s` not found." % name)
        return f(self.var_expand(line, depth=_stack_depth + 1) if name not in ("time", "timeit") else line)

    def run_cell_magic(self, name, line, cell):
        f = getattr(self, "_c_" + name, None)
        if f is None:
            raise UsageError("Cell magic `%%%%%s` not found." % name)
        return f(line, cell)

    def line_magic(self, name, line):
        return self.run_line_magic(name, line, _stack_depth=2)

    cell_magic = run_cell_magic

    # line magics

    def _m_pip(self, line):
        import shlex
        import subprocess

        env = dict(os.environ)
        # Debian marks its python "externally managed" (PEP 668); in a
        # sandbox the user's own site is the right place, as pip falls back
        # to when the system site is read-only.
        env.setdefault("PIP_BREAK_SYSTEM_PACKAGES", "1")
        rc = subprocess.call([sys.executable, "-m", "pip"] + shlex.split(line), env=env)
        _st.ns["_exit_code"] = rc
        args = shlex.split(line)
        if args[:1] in (["install"], ["uninstall"]) and rc == 0:
            import importlib
            import site

            usersite = site.getusersitepackages()
            if os.path.isdir(usersite) and usersite not in sys.path:
                site.addsitedir(usersite)
            importlib.invalidate_caches()
            print("Note: you may need to restart the kernel to use updated packages.")

    def _m_cd(self, line):
        arg = line.strip()
        if arg.startswith(("'", '"')) and arg[-1:] == arg[:1] and len(arg) > 1:
            arg = arg[1:-1]
        if not arg:
            arg = os.path.expanduser("~")
        elif arg == "-":
            if self._oldpwd is None:
                raise UsageError("cd -: no previous directory")
            arg = self._oldpwd
        old = os.getcwd()
        os.chdir(os.path.expanduser(arg))
        self._oldpwd = old
        os.environ["PWD"] = os.getcwd()
        print(os.getcwd())

    def _m_pwd(self, line):
        return os.getcwd()

    def _m_env(self, line):
        import re

        line = line.strip()
        if not line:
            return dict(os.environ)
        m = re.match(r"([^\s=]+)\s*(?:=\s*|\s+)(.*)$", line, re.S)
        if m is None:
            if line not in os.environ:
                raise UsageError("Environment does not have key: %s" % line)
            return os.environ[line]
        k, v = m.group(1), m.group(2)
        os.environ[k] = v
        print("env: %s=%s" % (k, v))

    def _m_set_env(self, line):
        k, _, v = line.strip().partition(" ")
        if not k:
            raise UsageError("usage: %set_env VAR value")
        os.environ[k] = v.strip()
        print("env: %s=%s" % (k, v.strip()))

    def _m_matplotlib(self, line):
        # Figures are always shown inline (as PNG and chart): nothing to set.
        return None

    def _m_time(self, line, cell=None):
        import time

        src = line if cell is None else cell
        fn = "<timed>"
        t0, c0 = time.perf_counter(), os.times()
        try:
            v = _run_source(src, fn)
        finally:
            t1, c1 = time.perf_counter(), os.times()
            u, s = c1.user - c0.user, c1.system - c0.system
            print("CPU times: user %s, sys: %s, total: %s" % (_fmt_time(u), _fmt_time(s), _fmt_time(u + s)))
            print("Wall time: %s" % _fmt_time(t1 - t0))
        return v

    def _m_timeit(self, line, cell=None):
        import timeit

        src = line if cell is None else cell
        t = timeit.Timer(src, globals=_st.ns)
        number, _ = t.autorange()
        runs = t.repeat(repeat=7, number=number)
        per = [r / number for r in runs]
        mean = sum(per) / len(per)
        sd = (sum((x - mean) ** 2 for x in per) / len(per)) ** 0.5
        print("%s ± %s per loop (mean ± std. dev. of %d runs, %d loops each)"
              % (_fmt_time(mean), _fmt_time(sd), len(per), number))

    def _m_who(self, line):
        names = sorted(k for k, v in _st.ns.items() if not k.startswith("_")
                       and k not in ("In", "Out") and type(v).__name__ != "module")
        print("\t".join(names) if names else "Interactive namespace is empty.")

    def _m_system(self, line):
        return self.getoutput(line, expand=False)

    _m_sx = _m_system

    # cell magics

    def _script(self, prog, line, cell):
        import shlex
        import subprocess

        argv = [prog] + shlex.split(line)
        p = subprocess.Popen(argv, stdin=subprocess.PIPE)
        try:
            p.communicate(cell.encode("utf-8", "surrogateescape"))
        except BaseException:
            p.kill()
            p.wait()
            raise
        _st.ns["_exit_code"] = p.returncode

    def _c_bash(self, line, cell):
        self._script("bash", line, cell)

    def _c_sh(self, line, cell):
        self._script("sh", line, cell)

    def _c_script(self, line, cell):
        import shlex

        argv = shlex.split(line)
        if not argv:
            raise UsageError("usage: %%script PROGRAM [ARGS]")
        self._script(argv[0], " ".join(shlex.quote(a) for a in argv[1:]), cell)

    def _c_writefile(self, line, cell):
        import shlex

        args = shlex.split(line)
        append = bool(args) and args[0] in ("-a", "--append")
        if append:
            args = args[1:]
        if len(args) != 1:
            raise UsageError("usage: %%writefile [-a] FILENAME")
        path = os.path.expanduser(args[0])
        exists = os.path.exists(path)
        with open(path, "a" if append else "w", encoding="utf-8") as f:
            f.write(cell)
        print("%s %s" % ("Appending to" if append else ("Overwriting" if exists else "Writing"), args[0]))

    def _c_time(self, line, cell):
        return self._m_time(line, cell)

    def _c_timeit(self, line, cell):
        return self._m_timeit(line, cell)

    def _c_capture(self, line, cell):
        raise UsageError("%%capture is not supported by this kernel")

    def _display_as(self, mime, cell):
        _publish({mime: cell, "text/plain": "<%s>" % mime}, {}, False)

    def _c_html(self, line, cell):
        self._display_as("text/html", cell)

    def _c_markdown(self, line, cell):
        self._display_as("text/markdown", cell)

    def _c_latex(self, line, cell):
        self._display_as("text/latex", cell)

    def _c_svg(self, line, cell):
        self._display_as("image/svg+xml", cell)

    def _c_javascript(self, line, cell):
        self._display_as("application/javascript", cell)

    _c_js = _c_javascript


_shell = _Shell()


def get_ipython():
    """IPython's get_ipython(), for code exported from notebooks."""
    return _shell


# ---------------------------------------------------------------- other languages
#
# A context whose language is not Python still runs this kernel, which keeps
# the framing, ordering, bounds and interrupt handling; the cells go to a
# persistent interpreter child (bash, node) that shares fds 1 and 2, so its
# output streams live and in order. Each child gets a private command pipe
# and status pipe; stdin is /dev/null so a cell reading stdin can't eat the
# commands. SIGINT reaches the child too (Go signals the kernel's process
# group): bash returns from the cell, node interrupts the running script or
# abandons the awaited promise; both then report the cell as done.

# Where the typescript package may be (Debian's node-typescript first); the
# Go side (languages.go, TypeScriptLibs) checks the same list.
_TS_LIBS = ("/usr/share/nodejs/typescript", "/usr/lib/node_modules/typescript", "/usr/local/lib/node_modules/typescript")


def _ts_lib():
    for d in _TS_LIBS:
        if os.path.isfile(os.path.join(d, "lib", "typescript.js")):
            return d
    return None


_JS_DRIVER = r"""
'use strict'
const fs = require('fs'), repl = require('repl'), vm = require('vm'), util = require('util')
const { PassThrough } = require('stream')
const cmdFd = Number(process.env.CS_CMD_FD), stFd = Number(process.env.CS_ST_FD)
delete process.env.CS_CMD_FD; delete process.env.CS_ST_FD
const r = repl.start({ input: new PassThrough(), output: new PassThrough(), terminal: false, useGlobal: true, prompt: '' })
let pending = null
const settle = (v) => { if (pending) { const p = pending; pending = null; p(v) } }
r._domain.removeAllListeners('error')
r._domain.on('error', (e) => { if (pending) settle([e]); else process.stderr.write('Uncaught ' + util.inspect(e) + '\n') })
process.on('uncaughtException', (e) => { if (pending) settle([e]); else process.stderr.write('Uncaught ' + util.inspect(e) + '\n') })
process.on('unhandledRejection', (e) => { process.stderr.write('Unhandled rejection: ' + util.inspect(e) + '\n') })
process.on('SIGINT', () => settle([Object.assign(new Error('interrupted'), { name: 'KeyboardInterrupt' })]))
const send = (o) => fs.writeSync(stFd, JSON.stringify(o) + '\n')
// Static imports become dynamic ones (a REPL-style cell is a script).
let nmod = 0
function imports(code) {
  return code.replace(/^[ \t]*import\s+(?:([\w$]+)\s*,?\s*)?(?:(\*\s+as\s+[\w$]+)|(\{[^}]*\}))?\s*(?:from\s*)?(['"][^'"]+['"])\s*;?[ \t]*$/gm,
    (m, def, star, named, src) => {
      // var: a cell that imports again (re-run) must not fail on redeclaration.
      const tmp = '__cs_mod' + (nmod++)
      const out = ['var ' + tmp + ' = await import(' + src + ');']
      if (def) out.push('var ' + def + ' = ' + tmp + '.default;')
      if (star) out.push('var ' + star.replace(/^\*\s+as\s+/, '') + ' = ' + tmp + ';')
      if (named) out.push('var ' + named.replace(/([\w$]+)\s+as\s+([\w$]+)/g, '$1: $2') + ' = ' + tmp + ';')
      return out.join(' ')
    })
}
// TypeScript (CS_TS_LIB): each cell transpiled on its own, as a script
// with ES module syntax (the imports then become dynamic ones above), every
// import kept (a cell may import for a later one); syntax errors are the
// cell's SyntaxError. Types are not checked, as with node's type stripping.
let ts = null
if (process.env.CS_TS_LIB) { ts = require(process.env.CS_TS_LIB); delete process.env.CS_TS_LIB }
function transpile(code) {
  if (!ts) return code
  const out = ts.transpileModule(code, { reportDiagnostics: true, fileName: 'cell.ts', compilerOptions: {
    target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, isolatedModules: true,
    preserveValueImports: true, importsNotUsedAsValues: ts.ImportsNotUsedAsValues.Preserve } })
  const d = (out.diagnostics || []).filter((x) => x.category === ts.DiagnosticCategory.Error)
  if (d.length) {
    const pos = d[0].file && d[0].start !== undefined ? d[0].file.getLineAndCharacterOfPosition(d[0].start) : null
    throw new SyntaxError(ts.flattenDiagnosticMessageText(d[0].messageText, '\n') + (pos ? ' (cell:' + (pos.line + 1) + ':' + (pos.character + 1) + ')' : ''))
  }
  return out.outputText
}
function run(code) {
  try { code = transpile(code) } catch (e) { return Promise.resolve([e]) }
  code = imports(code)
  if (!/\bawait\b/.test(code)) {
    try { return Promise.resolve([null, new vm.Script(code, { filename: 'cell' }).runInThisContext({ breakOnSigint: true })]) } catch (e) { return Promise.resolve([e]) }
  }
  return new Promise((res) => { pending = res; r.eval(code, r.context, 'cell', (err, v) => { if (pending === res) settle([err, v]) }) })
}
let buf = Buffer.alloc(0), busy = false
const queue = []
async function loop() {
  if (busy) return
  busy = true
  while (queue.length) {
    const msg = queue.shift()
    const saved = {}
    for (const [k, v] of Object.entries(msg.env || {})) { saved[k] = process.env[k]; process.env[k] = v }
    const [err, val] = await run(msg.code)
    for (const [k, v] of Object.entries(saved)) { if (v === undefined) delete process.env[k]; else process.env[k] = v }
    if (err) {
      const e = err instanceof Error ? err : new Error(util.inspect(err))
      send({ id: msg.id, t: 'error', name: e.name || 'Error', value: e.message || String(err), tb: String(e.stack || e) })
    } else if (val !== undefined) {
      send({ id: msg.id, t: 'result', text: util.inspect(val) })
    }
    send({ id: msg.id, t: 'done' })
  }
  busy = false
}
fs.createReadStream(null, { fd: cmdFd }).on('data', (d) => {
  buf = Buffer.concat([buf, d])
  while (buf.length >= 4) {
    const n = buf.readUInt32BE(0)
    if (buf.length < 4 + n) break
    queue.push(JSON.parse(buf.subarray(4, 4 + n).toString('utf8')))
    buf = buf.subarray(4 + n)
  }
  loop()
}).on('end', () => process.exit(0))
"""


_R_DRIVER = r"""
local({
  cmd <- file(paste0("/proc/self/fd/", Sys.getenv("CS_CMD_FD")), "r")
  st <- file(paste0("/proc/self/fd/", Sys.getenv("CS_ST_FD")), "w")
  Sys.unsetenv(c("CS_CMD_FD", "CS_ST_FD"))
  hex <- function(s) {
    b <- charToRaw(enc2utf8(paste(s, collapse = "\n")))
    if (length(b) == 0) "-" else paste(as.character(b), collapse = "")
  }
  unhex <- function(h) {
    if (h == "-" || nchar(h) == 0) return("")
    rawToChar(as.raw(strtoi(substring(h, seq(1, nchar(h), 2), seq(2, nchar(h), 2)), 16L)))
  }
  send <- function(...) {
    flush(stdout()); flush(stderr())
    cat(paste(...), "\n", sep = "", file = st); flush(st)
  }
  repeat {
    line <- readLines(cmd, n = 1)
    if (length(line) == 0) quit(save = "no", status = 0)
    f <- strsplit(line, " ", fixed = TRUE)[[1]]
    id <- f[1]
    saved <- list()
    if (f[3] != "-") {
      for (kv in readLines(f[3])) {
        k <- sub("=.*", "", kv)
        saved[k] <- list(Sys.getenv(k, unset = NA))
        do.call(Sys.setenv, stats::setNames(list(unhex(sub("^[^=]*=", "", kv))), k))
      }
    }
    tryCatch(withCallingHandlers({
      exprs <- parse(file = f[2], keep.source = FALSE)
      n <- length(exprs)
      for (i in seq_len(n)) {
        r <- withVisible(eval(exprs[[i]], envir = globalenv()))
        if (r$visible) {
          if (i == n) send(id, "result", hex(utils::capture.output(print(r$value))))
          else print(r$value)
        }
      }
    }, warning = function(w) {
      message("Warning message:\n", conditionMessage(w))
      invokeRestart("muffleWarning")
    }), error = function(e) {
      send(id, "error", hex(conditionMessage(e)), hex(deparse(conditionCall(e))))
    }, interrupt = function(e) {
      send(id, "interrupt")
    })
    for (k in names(saved)) {
      if (is.na(saved[[k]])) Sys.unsetenv(k) else do.call(Sys.setenv, stats::setNames(list(saved[[k]]), k))
    }
    send(id, "done")
  }
})
"""


# Java: one JVM running JShell's API with the local execution engine (state
# between cells). The same line protocol as R's: "<id> <cell file> <env
# file|->" in; "<id> result <hex>", "<id> error <hex name> <hex message>
# <hex traceback>", "<id> interrupt", "<id> done" out. During a cell,
# System.out/err send each write as "<id> out <1|2> <hex>" (at most 32 KiB
# of it a line), which the kernel turns into one output chunk each: E2B's
# Java kernel (IJava) sends every write of its PrintStream as a message of
# its own, so println's text and its newline are two chunks there (its
# tests check stdout[0] == the line). Between cells (a thread left running)
# they write to fds 1 and 2. The sandbox's and the cell's variables are also
# system properties (System.getProperty), as on E2B's Java kernel; SIGINT
# stops the running snippet.
_JAVA_DRIVER = r"""import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import jdk.jshell.*;

public class Driver {
  static PrintStream st;
  static String hex(String s) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    if (b.length == 0) return "-";
    StringBuilder sb = new StringBuilder();
    for (byte x : b) sb.append(String.format("%02x", x & 0xff));
    return sb.toString();
  }
  static String unhex(String h) {
    if (h.equals("-") || h.isEmpty()) return "";
    byte[] b = new byte[h.length() / 2];
    for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
    return new String(b, StandardCharsets.UTF_8);
  }
  static void send(String... parts) {
    System.out.flush(); System.err.flush();
    synchronized (Driver.class) { st.print(String.join(" ", parts) + "\n"); st.flush(); }
  }
  // The running cell's id; null between cells.
  static volatile String cell = null;
  // A PrintStream of a subclass: its println writes the text, then the
  // newline (a plain PrintStream of JDK 17 and later writes both at once),
  // as the PrintStream of IJava's JDK 11 does.
  static final class CellPrint extends PrintStream {
    CellPrint(OutputStream o) { super(o, true, StandardCharsets.UTF_8); }
  }
  // CellOut: System.out/err during a cell, a status line per write.
  static final class CellOut extends OutputStream {
    final String fd;
    final FileOutputStream raw;
    CellOut(String fd, FileDescriptor d) { this.fd = fd; this.raw = new FileOutputStream(d); }
    @Override public void write(int b) throws IOException { write(new byte[] {(byte) b}, 0, 1); }
    @Override public void write(byte[] b, int off, int len) throws IOException {
      String id = cell;
      if (id == null) { raw.write(b, off, len); return; }
      for (int i = 0; i < len; i += 32768) {
        int n = Math.min(32768, len - i);
        StringBuilder sb = new StringBuilder(2 * n + 16).append(id).append(" out ").append(fd).append(' ');
        for (int j = off + i; j < off + i + n; j++) { sb.append(Character.forDigit((b[j] >> 4) & 0xf, 16)).append(Character.forDigit(b[j] & 0xf, 16)); }
        sb.append('\n');
        synchronized (Driver.class) { st.print(sb); st.flush(); }
      }
    }
  }
  static String unquote(String v) {
    if (v == null || v.length() < 2 || !v.startsWith("\"") || !v.endsWith("\"")) return v;
    StringBuilder sb = new StringBuilder();
    for (int i = 1; i < v.length() - 1; i++) {
      char c = v.charAt(i);
      if (c == '\\' && i + 1 < v.length() - 1) {
        char n = v.charAt(++i);
        switch (n) { case 'n': sb.append('\n'); break; case 't': sb.append('\t'); break; case 'r': sb.append('\r'); break;
          case 'b': sb.append('\b'); break; case 'f': sb.append('\f'); break; default: sb.append(n); }
      } else sb.append(c);
    }
    return sb.toString();
  }
  static volatile boolean running = false;
  public static void main(String[] a) throws Exception {
    BufferedReader cmd = new BufferedReader(new InputStreamReader(new FileInputStream("/proc/self/fd/" + System.getenv("CS_CMD_FD")), StandardCharsets.UTF_8));
    st = new PrintStream(new FileOutputStream("/proc/self/fd/" + System.getenv("CS_ST_FD")), false, StandardCharsets.UTF_8);
    // The sandbox's variables are system properties too, as on E2B's Java kernel.
    for (Map.Entry<String, String> e : System.getenv().entrySet())
      if (!e.getKey().startsWith("CS_") && System.getProperty(e.getKey()) == null) System.setProperty(e.getKey(), e.getValue());
    System.setOut(new CellPrint(new CellOut("1", FileDescriptor.out)));
    System.setErr(new CellPrint(new CellOut("2", FileDescriptor.err)));
    JShell js = JShell.builder().executionEngine("local").out(System.out).err(System.err).build();
    sun.misc.Signal.handle(new sun.misc.Signal("INT"), s -> { if (running) js.stop(); });
    SourceCodeAnalysis sca = js.sourceCodeAnalysis();
    String line;
    while ((line = cmd.readLine()) != null) {
      String[] f = line.split(" ");
      String id = f[0];
      Map<String, String> saved = new HashMap<>();
      if (!f[2].equals("-")) {
        for (String kv : Files.readAllLines(Paths.get(f[2]))) {
          int eq = kv.indexOf('=');
          if (eq < 0) continue;
          String k = kv.substring(0, eq);
          saved.put(k, System.getProperty(k));
          System.setProperty(k, unhex(kv.substring(eq + 1)));
        }
      }
      String rest = new String(Files.readAllBytes(Paths.get(f[1])), StandardCharsets.UTF_8);
      String value = null;
      boolean failed = false;
      cell = id;
      running = true;
      try {
        while (!rest.isBlank() && !failed) {
          SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rest);
          String src = ci.source();
          if (ci.completeness() == SourceCodeAnalysis.Completeness.EMPTY) break;
          if (src == null || !ci.completeness().isComplete()) { src = rest; rest = ""; } else rest = ci.remaining();
          value = null;
          for (SnippetEvent ev : js.eval(src)) {
            if (ev.causeSnippet() != null) continue;
            if (ev.exception() != null) {
              Throwable x = ev.exception();
              String name = x instanceof EvalException ? ((EvalException) x).getExceptionClassName() : x.getClass().getName();
              if (x instanceof UnresolvedReferenceException) name = "UnresolvedReferenceException";
              StringWriter sw = new StringWriter();
              x.printStackTrace(new PrintWriter(sw));
              String tb = sw.toString();
              if (x instanceof EvalException) tb = name + ": " + String.valueOf(x.getMessage()) + "\n" + tb.substring(tb.indexOf('\n') + 1);
              boolean stopped = name.equals("jdk.jshell.spi.ExecutionControl$StoppedException") || x.getClass().getSimpleName().equals("StoppedException");
              if (stopped) send(id, "interrupt");
              else send(id, "error", hex(name.substring(name.lastIndexOf('.') + 1)), hex(String.valueOf(x.getMessage())), hex(tb));
              failed = true;
              break;
            }
            if (ev.status() == Snippet.Status.REJECTED) {
              StringBuilder msg = new StringBuilder();
              js.diagnostics(ev.snippet()).forEach(d -> msg.append(d.getMessage(Locale.ROOT)).append("\n"));
              String m = msg.toString().trim();
              send(id, "error", hex("CompilationException"), hex(m), hex(m + "\n" + ev.snippet().source() + "\n"));
              failed = true;
              break;
            }
            Snippet sn = ev.snippet();
            Snippet.SubKind k = sn.subKind();
            if (ev.value() != null && (k == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND || k == Snippet.SubKind.VAR_VALUE_SUBKIND || k == Snippet.SubKind.OTHER_EXPRESSION_SUBKIND)) {
              String type = sn instanceof VarSnippet ? ((VarSnippet) sn).typeName() : sn instanceof ExpressionSnippet ? ((ExpressionSnippet) sn).typeName() : "";
              value = type.equals("String") ? unquote(ev.value()) : ev.value();
            }
          }
        }
      } catch (Throwable t) {
        send(id, "error", hex(t.getClass().getSimpleName()), hex(String.valueOf(t.getMessage())), hex(String.valueOf(t)));
        failed = true;
      } finally {
        running = false;
      }
      if (!failed && value != null) send(id, "result", hex(value));
      for (Map.Entry<String, String> e : saved.entrySet()) {
        if (e.getValue() == null) System.clearProperty(e.getKey()); else System.setProperty(e.getKey(), e.getValue());
      }
      cell = null;
      send(id, "done");
    }
    System.exit(0);
  }
}
"""


class _Child:
    """A persistent interpreter for a non-Python context."""

    def __init__(self, lang):
        self.lang = lang
        self.p = None
        self.seq = 0
        self.buf = b""
        self.dir = None
        self.out = None  # R's stdout, read by the kernel (_drain)

    def _drain(self):
        """Write what R's stdout pipe holds through the line buffer; at EOF
        the pipe is closed. Non-blocking: R flushes its stdout before each
        status line, so what came before the line is there."""
        while self.out is not None:
            try:
                b = os.read(self.out, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                b = b""
            if not b:
                os.close(self.out)
                self.out = None
                return
            _line_write(1, b, _thread.get_ident() == _MAIN_THREAD)

    def _start(self):
        import subprocess
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="cs-kernel-")
        cmd_r, cmd_w = os.pipe()
        st_r, st_w = os.pipe()
        env = dict(os.environ)
        env["CS_CMD_FD"], env["CS_ST_FD"] = str(cmd_r), str(st_w)
        if self.lang == "bash":
            argv = ["bash", "--norc", "--noprofile", "-c",
                    "trap 'return 130 2>/dev/null' INT; while IFS= read -r -u %d line; do eval \"$line\"; done" % cmd_r]
        elif self.lang == "java":
            drv = os.path.join(self.dir, "Driver.java")
            with open(drv, "w") as f:
                f.write(_JAVA_DRIVER)
            # C1 only: a kernel's cells are short; the JVM starts faster.
            argv = ["java", "-XX:TieredStopAtLevel=1", "-Xshare:auto", drv]
        elif self.lang == "r":
            drv = os.path.join(self.dir, "driver.R")
            with open(drv, "w") as f:
                f.write(_R_DRIVER)
            argv = ["Rscript", "--vanilla", drv]
            # R writes a printed value in pieces ("[1]", its text, the
            # newline), each flushed: straight to fd 1 they became chunks
            # as the reads fell. E2B's R kernel sends a line whole, so R's
            # stdout comes through the kernel's line buffer (_drain).
            out_r, out_w = os.pipe()
        else:
            drv = os.path.join(self.dir, "driver.js")
            with open(drv, "w") as f:
                f.write(_JS_DRIVER)
            argv = ["node"]
            if self.lang == "typescript":
                # TypeScript's own transpiler where it is installed (any
                # node), else node's type stripping (22.6 or later).
                lib = _ts_lib()
                if lib:
                    env["CS_TS_LIB"] = lib
                else:
                    argv.append("--experimental-strip-types")
            argv.append(drv)
        _flush_streams()
        if self.lang == "r":
            try:
                self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_w, pass_fds=(cmd_r, st_w), env=env, cwd=os.getcwd())
            finally:
                os.close(out_w)
            os.set_inheritable(out_r, False)
            os.set_blocking(out_r, False)
            self.out = out_r
        else:
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=(cmd_r, st_w), env=env, cwd=os.getcwd())
        os.close(cmd_r)
        os.close(st_w)
        self.cmd, self.st, self.stw = cmd_w, st_r, st_w  # stw: the fd number in the child
        os.set_inheritable(cmd_w, False)
        os.set_inheritable(st_r, False)
        self.buf = b""

    def _stop(self):
        if self.out is not None:
            self._drain()
        for fd in (getattr(self, "cmd", None), getattr(self, "st", None), self.out):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.cmd = self.st = self.out = None
        if self.p is not None:
            try:
                self.p.kill()
            except OSError:
                pass
            self.p.wait()
        self.p = None

    def _line(self):
        """The next status line; None when the child is gone. SIGINT does
        not raise here (_st.crit): a KeyboardInterrupt landing between a read
        and its use would lose the child's answer. Instead an interrupt gives
        the child a second to report, after which it is ended (TimeoutError)."""
        import select
        import time

        deadline = None
        _st.crit = True
        try:
            while b"\n" not in self.buf:
                if _st.pending:
                    _st.pending = False
                    if deadline is None:
                        deadline = time.monotonic() + 1.0
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError
                fds = [self.st] if self.out is None else [self.st, self.out]
                ready = select.select(fds, [], [], 0.1)[0]
                if self.out is not None and self.out in ready:
                    self._drain()
                if self.st not in ready:
                    continue
                b = os.read(self.st, 1 << 16)
                if not b:
                    return None
                self.buf += b
        finally:
            _st.crit = False
        line, _, self.buf = self.buf.partition(b"\n")
        self._drain()
        return line

    def run(self, count, src, env):
        """Run one cell; returns an exit code when the interpreter exited."""
        if self.p is None or self.p.poll() is not None:
            if self.p is not None:
                _note("[kernel] the %s interpreter had exited; started a new one (its state is gone)" % self.lang)
                self._stop()
            self._start()
        self.seq += 1
        seq = self.seq
        if self.lang == "bash":
            path = os.path.join(self.dir, "cell")
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(src)
                f.write("\n")
            pre = "".join("%s=%s " % (k, _shq(v)) for k, v in env.items() if _bash_name(k))
            cmd = "%ssource %s </dev/null; echo \"%d $?\" >&%d\n" % (pre, _shq(path), seq, self.stw)
            data = cmd.encode("utf-8", "surrogateescape")
        elif self.lang in ("r", "java"):
            path = os.path.join(self.dir, "cell.R" if self.lang == "r" else "cell.jsh")
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(src)
                f.write("\n")
            envpath = "-"
            if env:
                envpath = os.path.join(self.dir, "env")
                with open(envpath, "w", encoding="ascii") as f:
                    for k, v in env.items():
                        if _bash_name(k):
                            f.write("%s=%s\n" % (k, v.encode("utf-8", "surrogateescape").hex() or "-"))
            data = ("%d %s %s\n" % (seq, path, envpath)).encode("utf-8", "surrogateescape")
        else:
            import json

            body = json.dumps({"id": seq, "code": src, "env": env}).encode("utf-8", "surrogateescape")
            data = len(body).to_bytes(4, "big") + body
        try:
            _write_all(self.cmd, data)
        except OSError:
            pass
        while True:
            try:
                line = self._line()
            except TimeoutError:
                self._stop()
                _send({"t": "error", "name": "KeyboardInterrupt",
                       "value": "the %s interpreter did not stop when interrupted; it was ended and its state is lost" % self.lang,
                       "tb": "KeyboardInterrupt\n"})
                return None
            if line is None:
                code = self.p.wait()
                self._stop()
                code = code if code >= 0 else 128 - code
                _note("[kernel] the %s interpreter exited with status %d; the next cell starts a new one (this one's state is gone)" % (self.lang, code))
                return code
            if self.lang == "bash":
                parts = line.split()
                if len(parts) == 2 and parts[0] == str(seq).encode():
                    rc = int(parts[1])
                    if rc == 130:
                        _send({"t": "error", "name": "KeyboardInterrupt", "value": "", "tb": "KeyboardInterrupt\n"})
                    elif rc != 0:
                        _send({"t": "error", "name": "BashError", "value": "exit status %d" % rc,
                               "tb": "the cell's last command exited with status %d\n" % rc})
                    return None
                continue
            if self.lang == "java":
                parts = line.decode("ascii", "replace").split(" ")
                if parts[0] != str(seq):
                    continue
                kind = parts[1] if len(parts) > 1 else ""

                def unhex(h):
                    return "" if h == "-" else bytes.fromhex(h).decode("utf-8", "replace")

                if kind == "out" and len(parts) > 3 and parts[2] in ("1", "2"):
                    try:
                        data = bytes.fromhex(parts[3])
                    except ValueError:
                        continue
                    _chunk(int(parts[2]), data)
                    continue
                if kind == "done":
                    return None
                if kind == "result" and len(parts) > 2:
                    _publish({"text/plain": unhex(parts[2])}, {}, True)
                elif kind == "error" and len(parts) > 4:
                    _send({"t": "error", "name": unhex(parts[2]), "value": unhex(parts[3]), "tb": unhex(parts[4])})
                elif kind == "interrupt":
                    _send({"t": "error", "name": "KeyboardInterrupt", "value": "", "tb": "KeyboardInterrupt\n"})
                continue
            if self.lang == "r":
                parts = line.decode("ascii", "replace").split(" ")
                if parts[0] != str(seq):
                    continue
                kind = parts[1] if len(parts) > 1 else ""

                def unhex(h):
                    return "" if h == "-" else bytes.fromhex(h).decode("utf-8", "replace")

                if kind == "done":
                    return None
                if kind == "result" and len(parts) > 2:
                    _publish({"text/plain": unhex(parts[2])}, {}, True)
                elif kind == "error" and len(parts) > 3:
                    msg, call = unhex(parts[2]), unhex(parts[3])
                    where = "Error in %s : " % call if call and call != "NULL" else "Error: "
                    _send({"t": "error", "name": "RError", "value": msg, "tb": where + msg + "\n"})
                elif kind == "interrupt":
                    _send({"t": "error", "name": "KeyboardInterrupt", "value": "", "tb": "KeyboardInterrupt\n"})
                continue
            import json

            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("id") != seq:
                continue
            t = m.get("t")
            if t == "done":
                return None
            if t == "result":
                _publish({"text/plain": str(m.get("text", ""))}, {}, True)
            elif t == "error":
                _send({"t": "error", "name": str(m.get("name", "Error")), "value": str(m.get("value", "")),
                       "tb": str(m.get("tb", ""))})


def _shq(s):
    return "'" + s.replace("'", "'\\''") + "'"


def _bash_name(k):
    return k.replace("_", "a").isalnum() and not k[:1].isdigit()


# ---------------------------------------------------------------- cells


def _add_cell(fn, src):
    """Keep a cell's source for tracebacks (linecache), under its file name."""
    _st.cells[fn] = src
    _st.fresh.append(fn)
    _register_cells()


def _register_cells(every=False):
    """Give linecache, once something has loaded it, the cells it doesn't
    have: those run since the last call, or with every, all of them (user
    code may have emptied its cache). Not every cell on every call: a
    session's thousandth cell would pay for the 999 before it."""
    lc = sys.modules.get("linecache")
    if lc is None:
        return
    cache = lc.cache
    for fn in _st.cells if every else _st.fresh:
        if fn not in cache:
            src = _st.cells[fn]
            cache[fn] = (len(src), None, src.splitlines(True), fn)
    _st.fresh.clear()


def _hide_machinery(te, seen):
    # A traceback shows the user's frames: not the kernel's own (magics,
    # running a cell), nor the asyncio loop frames above a top-level await
    # cell, in this exception and those chained to it.
    import traceback
    import os.path

    if te is None or id(te) in seen:
        return
    seen.add(id(te))
    aio = os.path.dirname(getattr(sys.modules.get("asyncio"), "__file__", "") or "") or None
    frames = [f for f in te.stack if f.filename != _KFILE]
    while frames and aio and frames[0].filename.startswith(aio + os.sep):
        frames.pop(0)
    te.stack = traceback.StackSummary.from_list(frames)
    _hide_machinery(te.__cause__, seen)
    _hide_machinery(te.__context__, seen)


def _send_error(e):
    import traceback
    import linecache  # noqa: F401  (traceback needs it; cells get registered)

    _register_cells(every=True)
    try:
        te = traceback.TracebackException(type(e), e, e.__traceback__)
        _hide_machinery(te, set())
        text = "".join(te.format())
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


def _split_last(src, fn):
    """Parse a (transformed) cell: (statements, last expression or None)."""
    import _ast

    tree = compile(src, fn, "exec", _ONLY_AST | _FLAGS, dont_inherit=True)
    body = tree.body
    last = None
    if body and isinstance(body[-1], _ast.Expr) and not _suppressed(src, body[-1]):
        last = body.pop()
    return body, last


def _run_parts(body, last, fn):
    import _ast

    if body:
        _run_code(compile(_ast.Module(body=body, type_ignores=[]), fn, "exec", _FLAGS, dont_inherit=True))
    if last is not None:
        return _run_code(compile(_ast.Expression(body=last.value), fn, "eval", _FLAGS, dont_inherit=True))
    return None


def _run_source(src, fn):
    """Run src (a cell body, e.g. under %%time) in the user's namespace;
    returns the value of its last expression."""
    if _maybe_magic(src):
        src = _transform(src)
    _add_cell(fn, src)
    body, last = _split_last(src, fn)
    return _run_parts(body, last, fn)


def _remember_input(count, src):
    """IPython's input history: In[count] and _i are the cell running now."""
    ns = _st.ns
    hist = ns.get("In")
    if isinstance(hist, list):
        while len(hist) < count:
            hist.append("")
        if len(hist) == count:
            hist.append(src)
    ns["_i"] = src


def _remember(count, v):
    """IPython's output history: Out, _, __, ___ and _<count>."""
    ns = _st.ns
    if v is None:
        return
    out = ns.get("Out")
    if isinstance(out, dict):
        out[count] = v
    ns["___"] = ns.get("__")
    ns["__"] = ns.get("_")
    ns["_"] = v
    ns["_%d" % count] = v


# Compiled cells by their (transformed) source: a cell run again (a
# polling cell, a benchmark's x + 2) skips the parse and the compile, about
# half of what a short cell costs the kernel. Only what compiled whole is
# kept, so a hit can't fail where a fresh compile would; tracebacks are the
# same, as the code objects get the cell's own file name.
_CODE_CACHE = {}
_CODE_CACHE_MAX = 128  # entries, each a source of at most _CODE_SRC_MAX
_CODE_SRC_MAX = 8 << 10


def _renamed(code, fn):
    """code (and the code objects nested in it) with co_filename fn."""
    consts = code.co_consts
    if any(type(c) is type(code) for c in consts):
        consts = tuple(_renamed(c, fn) if type(c) is type(code) else c for c in consts)
        return code.replace(co_filename=fn, co_consts=consts)
    return code.replace(co_filename=fn)


def _run_cached(hit, fn):
    body, last = hit
    if body is not None:
        _run_code(_renamed(body, fn))
    if last is not None:
        return _run_code(_renamed(last, fn))
    return None


def _run_parts_caching(body, last, fn, src):
    """_run_parts, keeping the compiled parts for the next run of src."""
    import _ast

    bc = lc = None
    if body:
        bc = compile(_ast.Module(body=body, type_ignores=[]), fn, "exec", _FLAGS, dont_inherit=True)
        _run_code(bc)
    if last is not None:
        lc = compile(_ast.Expression(body=last.value), fn, "eval", _FLAGS, dont_inherit=True)
    if len(src) <= _CODE_SRC_MAX:
        if len(_CODE_CACHE) >= _CODE_CACHE_MAX:
            _CODE_CACHE.pop(next(iter(_CODE_CACHE)))
        _CODE_CACHE[src] = (bc, lc)
    return _run_code(lc) if lc is not None else None


def _exec_cell(count, src):
    fn = "<cell-%d>" % count
    _remember_input(count, src)
    hit = None
    try:
        if _maybe_magic(src):
            src = _transform(src)
        _add_cell(fn, src)
        hit = _CODE_CACHE.get(src)
        if hit is None:
            body, last = _split_last(src, fn)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        _send_error(e)
        return None
    try:
        v = _run_cached(hit, fn) if hit is not None else _run_parts_caching(body, last, fn, src)
        _remember(count, v)
        if v is not None:
            data, md = _bundle(v)
            if "matplotlib.pyplot" in sys.modules or _is_figure(v):
                _publish(data, md, True)
            else:
                # Nothing of the user's runs between here and the done
                # frame (_flush_figures has nothing to show without pyplot):
                # the two go out together.
                _st.held = (data, md)
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
        # Frames of a fixed shape are written as text: every cell sends
        # them, and _enc's walk over a dict costs more than the format.
        _send(_Raw('{"t":"start","id":%d}' % cid), sync=False)
        try:
            if _st.child is not None:
                # Only the cell sees these: not os.environ, which a child
                # interpreter started by this cell would inherit for good.
                envd = {env[i].decode("utf-8", "surrogateescape"): env[i + 1].decode("utf-8", "surrogateescape")
                        for i in range(0, len(env) - 1, 2)}
                exit_code = _st.child.run(count, src, envd)
            else:
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
            _release_held()
            _send_error(e)
        except BaseException:
            pass
    finally:
        _st.busy = False
        _st.pending = False
    done = _Raw('{"t":"done","id":%d,"exit":%s}' % (cid, "null" if exit_code is None else "%d" % exit_code))
    held, _st.held = _st.held, None
    if held is not None:
        _publish(held[0], held[1], True, then=done, final=True)
    else:
        _send(done, final=True)


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
        _send(reply, final=True)
    except _TooBig:
        _send({"t": "reply", "id": cid, "err": "unsendable: the encoded value is over the limit of %d bytes" % _st.max_event}, final=True)


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
    _send(reply, final=True)


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
    lang = hello[4].decode() if len(hello) > 4 else "python"
    _st.go_marks = len(hello) > 5 and hello[5] == b"1"
    if len(hello) > 6 and hello[6].isdigit() and hasattr(os, "sched_setaffinity"):
        _st.wait_cpus = {int(hello[6])}
    if len(hello) > 7 and hello[7] and hasattr(os, "sched_setaffinity"):
        # Started away from the agent's CPU (an early kernel: python's
        # start-up and the agent's ran side by side): user code gets the
        # agent's whole set back.
        # Every thread: one a .pth file or sitecustomize started has the
        # narrowed set too.
        try:
            cpus = {int(c) for c in hello[7].split(b",")}
            tids = os.listdir("/proc/self/task")
        except (OSError, ValueError):
            cpus, tids = None, ()
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
            except (OSError, ValueError, OverflowError):  # gone, or a cpuset shrank meanwhile
                pass
    if lang != "python":
        _st.child = _Child(lang)
    # The user's namespace is a fresh __main__ module, not the kernel's globals.
    mod = type(sys)("__main__")
    mod.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = mod
    _st.ns = mod.__dict__
    builtins.display = display
    builtins.get_ipython = get_ipython
    builtins.__cs__ = _shell
    _st.ns["In"] = [""]
    _st.ns["Out"] = {}
    sys.stdout = _Stream(1, "<stdout>")
    sys.stderr = _Stream(2, "<stderr>")
    sys.argv = [""]
    sys.meta_path.insert(0, _ImportHook())
    sys.meta_path.append(_UserSiteFinder())
    for name, after in (("system", _ended_child), ("posix_spawn", _spawned_child), ("posix_spawnp", _spawned_child)):
        f = getattr(os, name, None)
        if f is not None:
            setattr(os, name, _flushing(f, after))
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child)
    handlers = {b"exec": _cmd_exec, b"get": _cmd_get, b"set": _cmd_set}
    # The first cell would pay for CPython's AST types (created on the first
    # PyCF_ONLY_AST compile: ~1 ms) and the display path's first use; pay
    # here instead, so a prewarmed kernel's first cell costs what the next
    # ones do. Touches no user state.
    _split_last("0", "<warm>")
    _bundle(0)
    while True:
        # Wait on the agent's CPU (internal/cpupin): its command then wakes
        # this thread there, and this thread's answer wakes the agent there,
        # not on a halted CPU. Only the main thread, only while it waits:
        # the cell gets back the set it ended with (threads and processes
        # the user started keep theirs).
        user_cpus = None
        if _st.wait_cpus is not None:
            try:
                user_cpus = os.sched_getaffinity(0)
                os.sched_setaffinity(0, _st.wait_cpus)
            except (OSError, ValueError, OverflowError):  # no longer ours (a cpuset shrank)
                _st.wait_cpus = user_cpus = None
        try:
            fields = _read_cmd()
        except EOFError:
            os._exit(0)
        finally:
            if user_cpus is not None:
                try:
                    os.sched_setaffinity(0, user_cpus)
                except OSError:
                    pass
        h = handlers.get(fields[0]) if fields else None
        if h is None:
            os._exit(70)
        try:
            h(fields)
        except KeyboardInterrupt:
            pass
        except Exception as e:  # a kernel bug must not end the context
            _note("[kernel] internal error: %s: %s" % (type(e).__name__, e))
        if _jstr is _jstr_py:
            # The first command is answered: _json's load (see _jstr) costs
            # no one a result now.
            _jstr_c()
