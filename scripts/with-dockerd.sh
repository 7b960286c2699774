#!/usr/bin/env bash
# with-dockerd.sh CMD [ARGS...]: runs CMD with a Docker engine answering.
#
# If `docker info` works (a system dockerd, Docker Desktop, $DOCKER_HOST),
# CMD just runs. Otherwise this starts dockerd (Debian's docker.io) in the
# background, waits until it answers, runs CMD, and stops the dockerd it
# started (SIGTERM, then SIGKILL to its process group), exiting with CMD's
# status. Only a dockerd this script started is ever stopped.
#
# Host notes (the build machines: Debian 12, root, cgroup v1, iptables over
# nf_tables, no registry access):
#   - cgroup v1 needs nothing special: Debian's dockerd 20.10 uses the
#     cgroupfs driver on v1 and v2 alike.
#   - bridge networking (the docker variant's network "all") needs dockerd's
#     iptables rules. Where iptables can't work (a CI container without the
#     netfilter modules: dockerd dies with "failed to create NAT chain" or
#     "iptables failed"), this retries with --iptables=false --ip-masq=false:
#     docker0 still exists and containers still reach the host on it (all
#     the tests need), but not beyond (no NAT).
#   - the data root stays the default (/var/lib/docker) on purpose: images
#     imported from environment builds survive between runs, so a 1.4 GB
#     rootfs is imported once, not per `make test`.
set -uo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi

if docker info >/dev/null 2>&1; then
  exec "$@"
fi
if [ -n "${DOCKER_HOST:-}" ]; then
  # Starting a local engine would not help: CMD would still use DOCKER_HOST.
  echo "with-dockerd: DOCKER_HOST=$DOCKER_HOST does not answer (docker info failed); start that engine or unset DOCKER_HOST" >&2
  exit 1
fi
if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
  echo "with-dockerd: dockerd/docker not installed (apt-get install docker.io; make deps does it)" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "with-dockerd: no Docker engine answers and only root can start dockerd; start it (sudo systemctl start docker) or run as root" >&2
  exit 1
fi

log=$(mktemp /tmp/with-dockerd.XXXXXX.log)
pidfile=$(mktemp -u /tmp/with-dockerd.XXXXXX.pid)
dpid=""
conf="" # our daemon.json (gVisor's runtime), removed at exit

stop_dockerd() {
  [ -n "$dpid" ] || return 0
  if kill -0 "$dpid" 2>/dev/null; then
    # Its children (the containerd it manages) run in sessions of their own:
    # note them now for the SIGKILL path.
    local children
    children=$(pgrep -P "$dpid" 2>/dev/null | tr '\n' ' ')
    kill -TERM "$dpid" 2>/dev/null
    # dockerd stops its containers and its own containerd; bounded wait.
    for _ in $(seq 1 100); do
      kill -0 "$dpid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$dpid" 2>/dev/null; then
      echo "with-dockerd: dockerd (pid $dpid) did not stop within 20s; killing it, its process group and its children ($children)" >&2
      kill -KILL -- "-$dpid" 2>/dev/null
      # shellcheck disable=SC2086 # a list of pids
      [ -n "$children" ] && kill -KILL $children 2>/dev/null
    fi
  fi
  wait "$dpid" 2>/dev/null
  dpid=""
  rm -f "$pidfile"
}

cpid=""
on_exit() {
  local rc=$?
  if [ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null; then
    # We were signalled while CMD runs: pass it on, give CMD a bounded
    # moment to finish, then take the engine down.
    kill -TERM "$cpid" 2>/dev/null
    for _ in $(seq 1 50); do
      kill -0 "$cpid" 2>/dev/null || break
      sleep 0.2
    done
  fi
  stop_dockerd
  [ -n "$conf" ] && rm -f "$conf"
  # Keep the engine's log only when something failed.
  if [ "$rc" -eq 0 ]; then
    rm -f "$log"
  else
    echo "with-dockerd: the dockerd log is $log" >&2
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_dockerd EXTRA_FLAGS...: starts dockerd in its own session (so its
# whole process group can be killed) and waits up to 60s for it to answer.
# Returns 0 when it answers, 1 when it died, 2 when it timed out.
start_dockerd() {
  : >"$log"
  setsid dockerd --pidfile "$pidfile" "$@" >>"$log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 120); do
    if docker info >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "$dpid" 2>/dev/null; then
      wait "$dpid" 2>/dev/null
      dpid=""
      return 1
    fi
    sleep 0.5
  done
  return 2
}

# gVisor: with runsc installed, the engine gets it as the runtime "runsc"
# (isolation gvisor on the docker variant). --host-uds=create lets the
# agent create its socket in the directory bound in from the host, where the
# docker variant connects; --network=none: the docker variant gives gVisor
# sandboxes no network, and runsc's own network stack fails to start under
# Debian's dockerd here. dockerd takes runtime arguments only from a
# config file: one of ours, unless the machine has its own (then add the
# runtime there).
extra=()
if command -v runsc >/dev/null; then
  if [ -e /etc/docker/daemon.json ]; then
    echo "with-dockerd: /etc/docker/daemon.json exists; not registering runsc (add \"runtimes\": {\"runsc\": {\"path\": \"$(command -v runsc)\", \"runtimeArgs\": [\"--host-uds=create\", \"--network=none\"]}} there for isolation gvisor)" >&2
  else
    conf=$(mktemp /tmp/with-dockerd.XXXXXX.json)
    printf '{"runtimes": {"runsc": {"path": "%s", "runtimeArgs": ["--host-uds=create", "--network=none"]}}}\n' "$(command -v runsc)" >"$conf"
    extra=(--config-file "$conf")
  fi
fi

echo "with-dockerd: no Docker engine answers; starting dockerd (log: $log)" >&2
start_dockerd "${extra[@]}"
st=$?
if [ $st -eq 1 ] && grep -qiE 'iptables|NAT chain' "$log"; then
  echo "with-dockerd: dockerd failed on iptables; retrying with --iptables=false --ip-masq=false (containers reach the host, not beyond)" >&2
  start_dockerd "${extra[@]}" --iptables=false --ip-masq=false
  st=$?
fi
if [ $st -ne 0 ]; then
  if [ $st -eq 2 ]; then
    echo "with-dockerd: dockerd did not answer within 60s; last lines of $log:" >&2
  else
    echo "with-dockerd: dockerd exited during start-up; last lines of $log:" >&2
  fi
  tail -n 25 "$log" >&2
  exit 1
fi
echo "with-dockerd: dockerd (pid $dpid) is up" >&2

# CMD runs in the background so that a signal to this script is handled at
# once (bash runs traps only between foreground commands); 0<&0 keeps its
# stdin, which a background command would otherwise lose to /dev/null.
"$@" 0<&0 &
cpid=$!
wait "$cpid"
rc=$?
cpid=""
exit "$rc"
