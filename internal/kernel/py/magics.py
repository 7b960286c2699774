# IPython without IPython: input transforms, !shell and %magics, get_ipython().
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
