# Debian 12 has no package of dockerfile-parse. E2B's SDK imports it when it
# loads and needs it only for Template.from_dockerfile, which no test here
# calls: this stand-in says so if one ever does.
class DockerfileParser:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("dockerfile-parse is not installed (e2e/e2bpy/shim stands in for it)")
