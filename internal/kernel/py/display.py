# Display: display(), rich output bundles, figures and pyplot.show as results.


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
