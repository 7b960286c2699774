#!/usr/bin/env bash
# Installs what the sandboxes and the tests need from Debian's packages, when
# missing: the python3 that sandboxes run (with numpy, pandas, matplotlib;
# `python` too, as E2B's sandboxes have it; R for the r kernel), iproute2 for the
# network tests' test internet,
# ipykernel + jupyter_client for the benchmark's Jupyter baseline (jupyter_server
# for the jupyter variant's tests, which start a real Jupyter Server), bubblewrap
# for the jail of environment build steps (and the isolation baseline), mmdebstrap
# for building environments, runsc (gVisor, Debian's 2022 build: isolation
# gvisor on local and docker), and a Docker engine (docker.io: dockerd and the
# docker CLI) for the docker variant's tests, which scripts/with-dockerd.sh
# starts when none runs; chromium (headless) for the web console's browser tests
# (internal/console). Idempotent; quiet when all is there.
#
# `install-deps.sh run` installs only what running a local sandbox needs (the
# sandbox's python3): `make run` uses it, so a first run on a fresh machine
# doesn't wait for a Docker engine and the test tools.
set -euo pipefail
if [ "${1:-}" = run ]; then
  pkgs=(python3)
else
pkgs=(python3 python-is-python3 chromium r-base-core python3-numpy python3-pandas python3-matplotlib python3-ipykernel python3-jupyter-client python3-jupyter-server python3-pip bubblewrap mmdebstrap iproute2 runsc)
# node runs the javascript kernel and the official-SDK tests (e2e/e2bjs); any
# node will do, Debian's nodejs only when there is none.
command -v node >/dev/null || pkgs+=(nodejs)
# TypeScript cells are transpiled by the typescript package on node < 22.6;
# the java kernel runs on JShell (a JDK).
pkgs+=(node-typescript default-jdk-headless)
# Any Docker engine will do (Docker's own docker-ce packages too): Debian's
# docker.io only when there is no dockerd at all.
# (/usr/sbin is not on every user's PATH.)
if ! { command -v dockerd || [ -x /usr/sbin/dockerd ]; } >/dev/null || ! command -v docker >/dev/null; then
  pkgs+=(docker.io)
fi
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "missing Debian packages: ${missing[*]} — install them as root (apt-get install ${missing[*]})" >&2; exit 1
  fi
fi
echo "installing: ${missing[*]}" >&2
${SUDO:-} apt-get update -qq
DEBIAN_FRONTEND=noninteractive ${SUDO:-} apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
