# Reconciles this Python's packages to a pip lock, as `uv pip sync` does:
# every distribution in the interpreter's own site-packages that neither the
# lock nor the code interpreter needs is uninstalled. "Needs" is the
# dependency closure, read from the installed metadata, of the lock's names
# and of the protected roots: what E2B's code interpreter imports to run
# (its Jupyter server and kernels, its HTTP server, its display formatters)
# and the installers themselves. A plain `uv pip sync` would remove those
# and leave a template whose run_code no longer answers.
#
#   python3 reconcile.py LOCK [--protect NAME ...] [--dry-run]
#
# Prints one "removed NAME VERSION" line per distribution removed.
import os
import re
import subprocess
import sys
import sysconfig
from importlib import metadata

try:
    from pip._vendor.packaging.requirements import Requirement
except ImportError:  # pip is protected, but be honest if it is gone
    from packaging.requirements import Requirement

PROTECTED = [
    # the code interpreter's Jupyter server and kernels
    "jupyter-server", "ipykernel", "ipython", "bash-kernel",
    # its HTTP server (template/server)
    "fastapi", "uvicorn", "httpx", "websockets", "requests", "pydantic",
    # what its kernel start-up scripts and formatters import
    "orjson", "pillow", "matplotlib", "e2b-charts",
    # the installers
    "pip", "setuptools", "wheel", "uv",
]


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_names(path):
    """The distributions a requirements lock pins (continuation lines joined)."""
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    names = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        req = Requirement(line.split(" --", 1)[0].strip())
        names[norm(req.name)] = set(req.extras)
    return names


def site_dirs():
    paths = sysconfig.get_paths()
    return {os.path.realpath(paths[k]) for k in ("purelib", "platlib")}


def installed():
    """The interpreter's own distributions: name -> Distribution. Those of
    other directories (Debian's dist-packages, a user site) are not ours to
    remove."""
    dirs = site_dirs()
    out = {}
    for d in metadata.distributions():
        base = os.path.realpath(str(d.locate_file("")))  # the .dist-info's directory
        name = d.metadata["Name"]
        if name and base in dirs:
            out.setdefault(norm(name), d)
    return out


def closure(roots):
    """The names reachable from roots (name -> extras) through Requires-Dist."""
    every = {}
    for d in metadata.distributions():
        if d.metadata["Name"]:
            every.setdefault(norm(d.metadata["Name"]), d)
    keep = set()
    todo = list(roots.items())
    seen = set()
    while todo:
        name, extras = todo.pop()
        key = (name, tuple(sorted(extras)))
        if key in seen:
            continue
        seen.add(key)
        keep.add(name)
        d = every.get(name)
        if d is None:
            continue
        for spec in d.requires or []:
            req = Requirement(spec)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((norm(req.name), set(req.extras)))
    return keep


def main(argv):
    if not argv or argv[0].startswith("-"):
        print("usage: reconcile.py LOCK [--protect NAME ...] [--dry-run]", file=sys.stderr)
        return 2
    lock, rest = argv[0], argv[1:]
    protected = list(PROTECTED)
    dry = "--dry-run" in rest
    for i, a in enumerate(rest):
        if a == "--protect" and i + 1 < len(rest):
            protected.append(rest[i + 1])
    roots = {norm(p): set() for p in protected}
    for name, extras in lock_names(lock).items():
        roots.setdefault(name, set()).update(extras)
    keep = closure(roots)
    dists = installed()
    remove = sorted(n for n in dists if n not in keep)
    for n in remove:
        print("removed", dists[n].metadata["Name"], dists[n].version, flush=True)
    if remove and not dry:
        env = dict(os.environ, PIP_BREAK_SYSTEM_PACKAGES="1")
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "--no-input",
                        "--disable-pip-version-check"] + [dists[n].metadata["Name"] for n in remove],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
