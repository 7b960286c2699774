# Charts: a drawn matplotlib figure as E2B's chart JSON.
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
