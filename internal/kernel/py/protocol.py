# The kernel's core: file descriptors, frames, JSON encoding, ordered output and streams.
#
# code-sandboxes lightweight Python kernel (stdlib only).
#
# The kernel runs as one Python module: source.go joins this directory's
# files, in the order it lists them, into one source (one file to write, one
# .pyc to load on a cold start, one set of globals). So a file here uses the
# others' names freely and is not imported on its own.
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
