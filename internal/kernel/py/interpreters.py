# The persistent interpreter child (bash, node, R, Java) a non-Python context's cells run in.


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
