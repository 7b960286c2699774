# Import hooks: patches applied as modules load (pyplot, PIL, subprocess) and the user site finder.


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
