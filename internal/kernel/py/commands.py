# Commands from Go (exec, get, set), interrupts and the kernel's main loop.


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
