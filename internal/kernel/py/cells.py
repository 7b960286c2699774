# Cells: running a cell's code, its last expression's result, errors and the code cache.


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
