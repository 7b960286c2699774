# Python imports this module at start-up when shim/ is on PYTHONPATH
# (run.sh puts it there). It changes no SDK file; it adapts two things:
#
# * httpx: Debian 12 packages httpx 0.23, E2B's SDK is written for 0.27+.
#   It needs the type alias httpx._types.ProxyTypes and passes `proxy=` to
#   clients and transports (0.26 renamed `proxies=` to it). Both are added
#   here; a `proxy=None` is dropped.
# * the network: the SDK asks for allowInternetAccess true on every create
#   unless told otherwise, and a sandbox with internet really dials out.
#   Every create goes out with it false, so the tests' sandboxes stay
#   offline. E2B_PY_ALLOW_INTERNET=1 leaves the SDK's choice alone.
import functools
import os


def _adapt_httpx():
    try:
        import httpx
        from httpx import _types
    except ImportError:
        return
    if hasattr(_types, "ProxyTypes"):
        return
    _types.ProxyTypes = _types.ProxiesTypes

    def accept_proxy(cls, transport):
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, proxy=None, **kwargs):
            if proxy is not None:
                if transport:
                    kwargs["proxy"] = httpx.Proxy(proxy) if isinstance(proxy, str) else proxy
                else:
                    kwargs["proxies"] = proxy
            init(self, *args, **kwargs)

        cls.__init__ = __init__

    for cls in (httpx.Client, httpx.AsyncClient):
        accept_proxy(cls, False)
    for cls in (httpx.HTTPTransport, httpx.AsyncHTTPTransport):
        accept_proxy(cls, True)


def _offline_creates():
    if os.environ.get("E2B_PY_ALLOW_INTERNET") == "1":
        return
    try:
        from e2b.sandbox_sync.sandbox_api import SandboxApi as SyncApi
        from e2b.sandbox_async.sandbox_api import SandboxApi as AsyncApi
    except Exception:  # not an SDK run, or an SDK without these
        return

    create = SyncApi._create_sandbox.__func__

    def sync_create(cls, *args, **kwargs):
        kwargs["allow_internet_access"] = False
        return create(cls, *args, **kwargs)

    SyncApi._create_sandbox = classmethod(sync_create)

    acreate = AsyncApi._create_sandbox.__func__

    async def async_create(cls, *args, **kwargs):
        kwargs["allow_internet_access"] = False
        return await acreate(cls, *args, **kwargs)

    AsyncApi._create_sandbox = classmethod(async_create)


_adapt_httpx()
_offline_creates()
