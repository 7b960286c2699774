# Tools: the `tools` module of code mode, calls checked against each tool's schema.
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
