#!/usr/bin/env bash
# A real single-node Kubernetes cluster for the tests of the kubernetes variant.
#
#   scripts/k8s-cluster.sh build           build kube-* + kubectl (tools/k8s) and the pause image, cached
#   scripts/k8s-cluster.sh up              start containerd, etcd, apiserver, controller-manager,
#                                          scheduler, kubelet and kube-router's network policy
#                                          controller; wait for the node to be Ready
#   scripts/k8s-cluster.sh down            stop everything, remove netns, mounts, iptables chains, cgroups
#   scripts/k8s-cluster.sh status          what runs; exit 0 only when the node is Ready
#   scripts/k8s-cluster.sh import IMG.tar  import a docker-save or OCI tarball ("-" = stdin) for pods
#   scripts/k8s-cluster.sh env             print the export lines (KUBECONFIG, CODE_SANDBOXES_K8S_IMPORT)
#   scripts/k8s-cluster.sh kubectl ARGS... the built kubectl, pointed at the cluster
#
# Kubernetes comes from the Go module proxy: tools/k8s is a tools module that
# requires k8s.io/kubernetes with its staging modules replaced by their tags.
# containerd, runc, etcd and the CNI plugins are Debian's. The containerd is a
# private instance (own config, root, state, socket and runc root), so Docker's
# is untouched. No registry: images are imported (pods use imagePullPolicy
# Never); the sandbox ("pause") image is a static Go binary from tools/k8s/pause.
#
# Needs root on a real host (netns, mounts, cgroups, iptables). One cluster per
# host: the ports are fixed (6443, 12379-12380, 10248, 10250, 10257, 10259) and
# down removes every KUBE-* and CNI-* iptables chain. The host-wide lock
# /var/cache/code-sandboxes/k8s/cluster.lock serialises up and down;
# scripts/with-k8s.sh holds it for a whole test run. up replaces any cluster
# already there; down is idempotent and safe after a failed or half-done up.
# Only for tests: authorization is AlwaysAllow, no kube-proxy or cluster DNS
# (pods are reached through the API server: exec, port-forward).
#
# NetworkPolicy is enforced by kube-router's network policy controller alone
# (--run-firewall; iptables + ipset on the host, for the bridge CNI's pods),
# built from the Go module proxy as Kubernetes is (tools/kube-router). It runs
# as a host daemon, not a kube-system pod, so the kubernetes variant can't
# detect it: env exports CODE_SANDBOXES_K8S_NETWORKPOLICY=enforced for the
# tests, which then set kubernetes.Options.NetworkPolicyEnforced.
#
# Environment:
#   CODE_SANDBOXES_K8S_RUN_DIR   all cluster state (default /run/code-sandboxes-k8s)
#   CODE_SANDBOXES_K8S_CACHE     built binaries and images (default /var/cache/code-sandboxes/k8s)
#   CODE_SANDBOXES_K8S_NODE_IP   node IP (default: the IPv4 address of the default route's device)
#   CODE_SANDBOXES_K8S_LOGS_DIR  if set, down copies the daemons' logs there before removing the run dir
#   CODE_SANDBOXES_K8S_KEEP_ON_FAILURE=1  a failed up leaves its state for inspection (else it runs down)
#   CODE_SANDBOXES_K8S_LOCK_TIMEOUT  seconds to wait for the host lock (default 1800)
set -euo pipefail

K8S_VERSION=v1.34.4
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=$ROOT/tools/k8s
SELF=$ROOT/scripts/k8s-cluster.sh
RUN=${CODE_SANDBOXES_K8S_RUN_DIR:-/run/code-sandboxes-k8s}
CACHE=${CODE_SANDBOXES_K8S_CACHE:-/var/cache/code-sandboxes/k8s}
# The lock guards host-wide state (ports, iptables chains, cgroups), so its
# path does not follow CODE_SANDBOXES_K8S_CACHE or _RUN_DIR.
LOCK=/var/cache/code-sandboxes/k8s/cluster.lock
NODE_NAME=code-sandboxes-k8s
NET_NAME=code-sandboxes-k8s
BRIDGE=csk8s0
POD_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
API_PORT=6443
ETCD_PORT=12379 # not 2379/2380, so a system etcd (Debian's etcd-server service) cannot collide
ETCD_PEER_PORT=12380
PORTS=("$API_PORT" "$ETCD_PORT" "$ETCD_PEER_PORT" 10250 10248 10257 10259)
DAEMONS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-router)
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
PAUSE_IMAGE=registry.k8s.io/pause:local
APT_PKGS=(containerd runc etcd-server containernetworking-plugins conntrack socat iptables ipset openssl curl)
KR_TOOLS=$ROOT/tools/kube-router

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH

SOCK=$RUN/containerd/containerd.sock
KUBECONFIG_PATH=$RUN/kubeconfig
LOGS=$RUN/logs
PIDS=$RUN/pids
PKI=$RUN/pki
IPAM_DIR=$RUN/cni/ipam

log() { printf 'k8s-cluster: %s\n' "$*" >&2; }

# now_ms prints a monotonic-enough clock in milliseconds.
now_ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }

# tail_logs prints the last lines of the named daemons' logs (names under $LOGS).
tail_logs() {
  local n
  for n in "$@"; do
    [ -s "$LOGS/$n.log" ] || continue
    printf -- '----- last lines of %s -----\n' "$LOGS/$n.log" >&2
    tail -n "${TAIL_LINES:-40}" "$LOGS/$n.log" >&2
  done
}

# die MESSAGE [LOG NAMES...]: prints the error and the logs' tails, exits 1.
die() {
  local msg=$1
  shift
  log "ERROR: $msg"
  tail_logs "$@"
  exit 1
}

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (netns, mounts, cgroups, iptables)"; }

# lock takes the host-wide cluster lock unless a parent (with-k8s.sh) holds it.
lock() {
  [ -n "${CODE_SANDBOXES_K8S_LOCK_HELD:-}" ] && return 0
  mkdir -p "$(dirname "$LOCK")"
  exec 9>>"$LOCK"
  if ! flock -n 9; then
    log "waiting for the cluster lock $LOCK (held by: $(cat "$LOCK.owner" 2>/dev/null || echo unknown))"
    flock -w "${CODE_SANDBOXES_K8S_LOCK_TIMEOUT:-1800}" 9 || die "timed out waiting for the cluster lock $LOCK"
  fi
  echo "pid $$ ($0 ${CMD:-})" >"$LOCK.owner"
}

# ---------------------------------------------------------------- build

key() { echo "$K8S_VERSION-$(sha256sum "$TOOLS/go.sum" | cut -c1-12)"; }
kr_bin() { echo "$CACHE/kube-router-$(sha256sum "$KR_TOOLS/go.sum" | cut -c1-12)"; }
BIN=$CACHE/$(key)/bin
pause_tar() {
  local h
  h=$( (cat "$TOOLS/pause/main.go"; go env GOVERSION GOARCH 2>/dev/null) | sha256sum | cut -c1-12)
  echo "$CACHE/images/pause-$h.tar"
}

have_bins() {
  local c
  for c in "${K8S_CMDS[@]}"; do [ -x "$BIN/$c" ] || return 1; done
}

# mkimage NAME ROOTFS OUT.tar ENTRYPOINT USER: a one-layer OCI image layout
# tarball with the io.containerd.image.name annotation, for ctr import.
mkimage() {
  local name=$1 rootfs=$2 out=$3 entry=$4 user=$5 arch w layer cfg man ls cs ms
  arch=$(go env GOARCH)
  w=$(mktemp -d)
  mkdir -p "$w/blobs/sha256"
  tar -C "$rootfs" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$w/layer.tar" .
  layer=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
  ls=$(stat -c %s "$w/layer.tar")
  mv "$w/layer.tar" "$w/blobs/sha256/$layer"
  printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["%s"],"User":"%s","WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$arch" "$entry" "$user" "$layer" >"$w/cfg"
  cfg=$(sha256sum "$w/cfg" | cut -d' ' -f1)
  cs=$(stat -c %s "$w/cfg")
  mv "$w/cfg" "$w/blobs/sha256/$cfg"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$cfg" "$cs" "$layer" "$ls" >"$w/man"
  man=$(sha256sum "$w/man" | cut -d' ' -f1)
  ms=$(stat -c %s "$w/man")
  mv "$w/man" "$w/blobs/sha256/$man"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$man" "$ms" "$arch" "$name" "${name##*:}" >"$w/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$w/oci-layout"
  tar -C "$w" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out" oci-layout index.json blobs
  rm -rf "$w"
}

cmd_build() {
  command -v go >/dev/null || die "go is not installed"
  local t0 tmp ldflags pt
  mkdir -p "$CACHE"
  pt=$(pause_tar)
  have_bins && [ -s "$pt" ] && [ -x "$(kr_bin)" ] && return 0
  # Its own lock, not the cluster's: a build need not wait for a test run.
  exec 8>>"$CACHE/build.lock"
  flock -w 3600 8 || die "timed out waiting for $CACHE/build.lock"
  if ! have_bins; then
    t0=$(now_ms)
    log "building Kubernetes $K8S_VERSION into $BIN (cold: about 4 min on 2 cores)"
    tmp=$BIN.tmp.$$
    rm -rf "$tmp"
    mkdir -p "$tmp"
    ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
    ldflags+=" -X k8s.io/component-base/version.gitMajor=$(echo "$K8S_VERSION" | cut -d. -f1 | tr -d v)"
    ldflags+=" -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
    ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
    ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
    if ! (cd "$TOOLS" && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" CGO_ENABLED=0 \
      go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${K8S_CMDS[@]/#/k8s.io/kubernetes/cmd/}"); then
      rm -rf "$tmp"
      die "go build of Kubernetes $K8S_VERSION failed"
    fi
    rm -rf "$BIN"
    mv "$tmp" "$BIN"
    log "built in $(($(now_ms) - t0)) ms: $(cd "$BIN" && echo *)"
  fi
  if [ ! -s "$pt" ]; then
    tmp=$(mktemp -d)
    mkdir -p "$tmp/rootfs" "$CACHE/images"
    (cd "$TOOLS" && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" CGO_ENABLED=0 \
      go build -trimpath -ldflags '-s -w' -o "$tmp/rootfs/pause" ./pause) || {
      rm -rf "$tmp"
      die "go build of tools/k8s/pause failed"
    }
    mkimage "$PAUSE_IMAGE" "$tmp/rootfs" "$tmp/pause.tar" /pause 65535:65535
    mv "$tmp/pause.tar" "$pt"
    rm -rf "$tmp"
    log "pause image: $pt"
  fi
  if [ ! -x "$(kr_bin)" ]; then
    t0=$(now_ms)
    (cd "$KR_TOOLS" && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" CGO_ENABLED=0 \
      go build -trimpath -ldflags '-s -w' -o "$(kr_bin).tmp.$$" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router) || {
      rm -f "$(kr_bin).tmp.$$"
      die "go build of kube-router (tools/kube-router) failed"
    }
    mv "$(kr_bin).tmp.$$" "$(kr_bin)"
    log "kube-router built in $(($(now_ms) - t0)) ms: $(kr_bin)"
  fi
  exec 8>&-
}

# ---------------------------------------------------------------- processes

# pid_of NAME prints the daemon's pid if it is alive (not a zombie) and still
# runs the binary it was started with.
pid_of() {
  local f=$PIDS/$1.pid pid exe st
  [ -r "$f" ] || return 1
  read -r pid exe <"$f" || true
  [ -n "$pid" ] || return 1
  st=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  case $st in Z*) return 1 ;; esac
  [ -z "$exe" ] || [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ] || return 1
  echo "$pid"
}

alive() { # pid (zombies count as dead: PID 1 here reaps orphans lazily)
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  case $st in Z*) return 1 ;; esac
}

# start NAME BINARY ARGS...: runs a daemon in its own session, logs to $LOGS.
start() {
  local name=$1 exe
  shift
  exe=$(readlink -f "$(command -v "$1")")
  NO_PROXY="127.0.0.1,localhost,$NODE_IP${NO_PROXY:+,$NO_PROXY}" no_proxy="127.0.0.1,localhost,$NODE_IP${no_proxy:+,$no_proxy}" \
    setsid "$exe" "${@:2}" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  local pid=$! i
  # Until the fork has exec'd the daemon its /proc/PID/exe is bash's or
  # setsid's, and pid_of (which checks exe against pid reuse) would call
  # the daemon dead: wait for the exec (bounded) before anyone looks.
  for ((i = 0; i < 100; i++)); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ] && break
    alive "$pid" || break
    sleep 0.05
  done
  echo "$pid $exe" >"$PIDS/$name.pid"
}

# stop NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 10).
stop() {
  local name=$1 secs=${2:-10} pid i t0
  pid=$(pid_of "$name") || { rm -f "$PIDS/$name.pid"; return 0; }
  t0=$(now_ms)
  kill -TERM "$pid" 2>/dev/null || true
  while alive "$pid" && [ $(($(now_ms) - t0)) -lt $((secs * 1000)) ]; do sleep 0.1; done
  if alive "$pid"; then
    log "$name (pid $pid) ignored SIGTERM for ${secs}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
    alive "$pid" && log "WARNING: $name (pid $pid) is still alive after SIGKILL"
  fi
  log "stopped $name in $(($(now_ms) - t0)) ms"
  rm -f "$PIDS/$name.pid"
}

# wait_until DESC SECONDS DAEMON CMD...: polls CMD until it succeeds; fails with
# DAEMON's log tail on timeout or when DAEMON dies first.
wait_until() {
  local desc=$1 secs=$2 daemon=$3 t0
  shift 3
  t0=$(now_ms)
  until "$@" >/dev/null 2>&1; do
    if [ -n "$daemon" ] && ! pid_of "$daemon" >/dev/null; then
      die "$daemon exited while waiting for $desc" "$daemon"
    fi
    if [ $(($(now_ms) - t0)) -ge $((secs * 1000)) ]; then
      die "timed out after ${secs}s waiting for $desc" ${daemon:+"$daemon"}
    fi
    sleep 0.2
  done
  log "$desc after $(($(now_ms) - T_UP)) ms"
}

kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" --request-timeout=10s "$@"; }
ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

# ---------------------------------------------------------------- up

install_deps() {
  local p missing=()
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing: ${missing[*]}"
  local out
  out=$(mktemp)
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$out" 2>&1; then
    cat "$out" >&2
    rm -f "$out"
    die "apt-get install ${missing[*]} failed"
  fi
  rm -f "$out"
}

cni_bin_dir() {
  local d
  for d in /usr/lib/cni /opt/cni/bin; do
    [ -x "$d/bridge" ] && [ -x "$d/host-local" ] && [ -x "$d/portmap" ] && [ -x "$d/firewall" ] && { echo "$d"; return; }
  done
  die "CNI plugins (bridge, host-local, portmap, firewall) not found in /usr/lib/cni or /opt/cni/bin"
}

node_ip() {
  local dev ip
  if [ -n "${CODE_SANDBOXES_K8S_NODE_IP:-}" ]; then echo "$CODE_SANDBOXES_K8S_NODE_IP"; return; fi
  dev=$(ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i+1); exit}}')
  [ -n "$dev" ] && ip=$(ip -4 -o addr show dev "$dev" scope global | awk '{sub(/\/.*/, "", $4); print $4; exit}')
  [ -n "${ip:-}" ] || ip=$(ip -4 -o addr show scope global | awk '$2 !~ /^(docker|br-|veth|cni|'"$BRIDGE"')/ {sub(/\/.*/, "", $4); print $4; exit}')
  [ -n "${ip:-}" ] || die "no global IPv4 address for the node (set CODE_SANDBOXES_K8S_NODE_IP)"
  echo "$ip"
}

# cert NAME CN O EKU [SAN]: a P-256 key and a certificate signed by the CA.
cert() {
  local n=$1 cn=$2 o=$3 eku=$4 san=${5:-} subj
  subj="/CN=$cn"
  [ -n "$o" ] && subj="/O=$o$subj"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$PKI/$n.ext"
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -keyout "$PKI/$n.key" \
    -out "$PKI/$n.csr" -subj "$subj" 2>/dev/null
  openssl x509 -req -in "$PKI/$n.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 3650 -extfile "$PKI/$n.ext" -out "$PKI/$n.crt" 2>/dev/null
  rm -f "$PKI/$n.csr" "$PKI/$n.ext"
}

gen_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -keyout "$PKI/ca.key" -out "$PKI/ca.crt" \
    -days 3650 -subj "/CN=code-sandboxes-k8s-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,digitalSignature,keyCertSign,cRLSign" 2>/dev/null
  cert apiserver kube-apiserver "" serverAuth \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$SERVICE_IP,IP:$NODE_IP"
  cert admin admin system:masters clientAuth
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
  cert controller-manager system:kube-controller-manager "" clientAuth
  cert scheduler system:kube-scheduler "" clientAuth
  cert kubelet "system:node:$NODE_NAME" system:nodes clientAuth,serverAuth \
    "DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP"
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key" 2>/dev/null
  openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
}

# kubeconfig FILE CERTNAME: a kubeconfig with the CA and the client cert embedded.
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: code-sandboxes
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$2.crt")
    client-key-data: $(base64 -w0 "$PKI/$2.key")
contexts:
- name: code-sandboxes
  context:
    cluster: code-sandboxes
    user: $2
current-context: code-sandboxes
EOF
  chmod 600 "$1"
}

write_configs() {
  mkdir -p "$RUN/containerd" "$RUN/cni/net.d" "$IPAM_DIR" "$RUN/kubelet" "$RUN/pod-logs"
  cat >"$RUN/containerd/config.toml" <<EOF
# Private containerd for the code-sandboxes test cluster (not Docker's).
version = 2
root = "$RUN/containerd/root"
state = "$RUN/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  level = "info"
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$RUN/containerd/opt"
[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = "$RUN/containerd/runc-v1"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: without this, runc cannot set the
  # kubelet's oom_score_adj of -998 and every sandbox fails ("can't get final
  # child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # Pod netns mounts live under the state dir, so down finds and unmounts any
  # leftover instead of leaving /var/run/netns/cni-*.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$RUN/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$RUN/cni/net.d"
    max_conf_num = 1
EOF
  # firewall: Docker sets the FORWARD policy to DROP; the plugin's CNI-FORWARD
  # chain lets pod traffic through.
  cat >"$RUN/cni/net.d/10-$NET_NAME.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$NET_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$IPAM_DIR",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall", "backend": "iptables"}
  ]
}
EOF
  kubeconfig "$KUBECONFIG_PATH" admin
  kubeconfig "$RUN/controller-manager.kubeconfig" controller-manager
  kubeconfig "$RUN/scheduler.kubeconfig" scheduler
  kubeconfig "$RUN/kubelet.kubeconfig" kubelet
  # evictionHard {} and image GC at 100/99 %: CI disk pressure must not evict
  # test pods or delete imported images (there is no registry to pull from).
  cat >"$RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$SOCK
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: AlwaysAllow
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
failSwapOn: false
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
podLogsDir: $RUN/pod-logs
resolvConf: /etc/resolv.conf
EOF
}

check_ports() {
  local p busy=""
  for p in "${PORTS[@]}"; do
    if [ -n "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then busy+=" $p"; fi
  done
  [ -z "$busy" ] || die "ports in use:$busy (is another cluster running? $SELF status / down); listeners: $(ss -Hltnp | awk '{print $4, $6}' | tr '\n' ' ')"
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

up_failed() {
  local rc=$?
  trap - EXIT
  [ $rc -eq 0 ] && return 0
  if [ "${CODE_SANDBOXES_K8S_KEEP_ON_FAILURE:-}" = 1 ]; then
    log "up failed; state kept in $RUN (CODE_SANDBOXES_K8S_KEEP_ON_FAILURE=1); run '$SELF down' when done"
  else
    log "up failed; tearing down what was started"
    do_down || true
  fi
  exit $rc
}

cmd_up() {
  need_root
  lock
  cmd_build # a no-op when cached
  install_deps
  if [ -e "$RUN" ]; then
    log "$RUN exists: tearing down the previous cluster first"
    do_down
  fi
  check_ports
  T_UP=$(now_ms)
  NODE_IP=$(node_ip)
  CNI_BIN=$(cni_bin_dir)
  trap up_failed EXIT
  mkdir -p "$RUN" "$LOGS" "$PIDS"
  # Host paths the kubelet and libcni create outside the run dir: remember
  # which did not exist, so down removes only what this cluster made.
  for d in /var/lib/kubelet /var/lib/cni /var/log/containers; do
    [ -e "$d" ] || echo "$d" >>"$RUN/created-host-paths"
  done
  gen_pki
  write_configs
  log "PKI and configs after $(($(now_ms) - T_UP)) ms (node $NODE_NAME, IP $NODE_IP)"

  start containerd containerd --config "$RUN/containerd/config.toml"
  wait_until "containerd" 30 containerd ctr --address "$SOCK" version
  ctr_ images import "$(pause_tar)" >/dev/null || die "importing the pause image failed" containerd

  start etcd etcd --name default --data-dir "$RUN/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls ""
  wait_until "etcd" 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address="$NODE_IP" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" --anonymous-auth=false --authorization-mode=AlwaysAllow \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP,Hostname \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true --profiling=false \
    --cert-dir="$RUN/apiserver"
  wait_until "kube-apiserver ready" 90 kube-apiserver \
    curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://127.0.0.1:$API_PORT/readyz"

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$RUN/controller-manager.kubeconfig" --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port=10257 --cert-dir="$RUN/controller-manager" \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=false --cluster-name=code-sandboxes --profiling=false
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$RUN/scheduler.kubeconfig" --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port=10259 --cert-dir="$RUN/scheduler" --profiling=false
  start kubelet "$BIN/kubelet" \
    --config="$RUN/kubelet.yaml" --kubeconfig="$RUN/kubelet.kubeconfig" --root-dir="$RUN/kubelet" \
    --node-ip="$NODE_IP" --hostname-override="$NODE_NAME"

  wait_until "kube-controller-manager healthy" 60 kube-controller-manager curl -skf https://127.0.0.1:10257/healthz
  wait_until "kube-scheduler healthy" 60 kube-scheduler curl -skf https://127.0.0.1:10259/healthz
  wait_until "node $NODE_NAME Ready" 90 kubelet node_ready
  # NetworkPolicy: kube-router's policy controller only (no routing, no
  # service proxy), on the node's iptables.
  start kube-router "$(kr_bin)" --kubeconfig="$KUBECONFIG_PATH" --hostname-override="$NODE_NAME" \
    --run-firewall=true --run-router=false --run-service-proxy=false \
    --enable-ipv4=true --enable-ipv6=false --health-port=20244 --metrics-port=0 --v=1
  wait_until "kube-router's policy controller healthy" 60 kube-router curl -sf http://127.0.0.1:20244/healthz
  # Pods cannot be created before the controller-manager made the namespace's
  # "default" ServiceAccount (and kube-root-ca.crt for the token volume).
  wait_until "default ServiceAccount and kube-root-ca.crt" 60 kube-controller-manager \
    kc -n default get serviceaccount/default configmap/kube-root-ca.crt
  trap - EXIT
  log "cluster up in $(($(now_ms) - T_UP)) ms; images load with: $SELF import IMAGE.tar"
  cmd_env
}

cmd_env() {
  echo "export KUBECONFIG=$KUBECONFIG_PATH"
  echo "export CODE_SANDBOXES_K8S_IMPORT='$SELF import'"
  echo "export CODE_SANDBOXES_K8S_NETWORKPOLICY=enforced"
}

# ---------------------------------------------------------------- import

cmd_import() {
  [ $# -eq 1 ] || die "usage: $SELF import IMAGE.tar (docker save or OCI layout tarball; - for stdin)"
  need_root
  pid_of containerd >/dev/null || die "the cluster's containerd is not running (run: $SELF up)"
  local t0
  t0=$(now_ms)
  ctr_ images import "$1" >&2 || die "ctr import of $1 failed" containerd
  log "imported $1 in $(($(now_ms) - t0)) ms"
}

# ---------------------------------------------------------------- down

# mounts_under DIR: mount points at or below DIR, deepest (last mounted) first.
mounts_under() {
  awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | tac
}

# ipam_in_use: host-local still holds a pod IP (CNI DEL has not run for it).
ipam_in_use() {
  find "$IPAM_DIR" -type f ! -name 'last_reserved_ip*' ! -name lock 2>/dev/null | grep -q .
}

containers_gone() {
  [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && ! ipam_in_use
}

# our_shims prints the pids of containerd shims started by this cluster's containerd.
our_shims() {
  pgrep -f -- "^[^ ]*containerd-shim[^ ]* .*-address $SOCK( |\$)" || true
}

# iptables_cleanup BIN: removes every rule that jumps to a KUBE-* or CNI-*
# chain, then those chains, in all tables.
iptables_cleanup() {
  local ipt=$1 t rule chain
  command -v "$ipt" >/dev/null || return 0
  for t in filter nat mangle raw; do
    "$ipt" -t "$t" -S >/dev/null 2>&1 || continue
    # Rules in other chains that reference ours.
    "$ipt" -t "$t" -S 2>/dev/null | grep -E '^-A ' | grep -vE '^-A (KUBE|CNI)-' | grep -E -- '-(j|g) (KUBE|CNI)-' | while read -r rule; do
      eval "set -- ${rule#-A }"
      "$ipt" -t "$t" -D "$@" 2>/dev/null || true
    done || true
    for chain in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}'); do
      "$ipt" -t "$t" -F "$chain" 2>/dev/null || true
    done
    for chain in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}'); do
      "$ipt" -t "$t" -X "$chain" 2>/dev/null || log "WARNING: could not delete $ipt -t $t chain $chain"
    done
  done
}

do_down() {
  local t0 p f left=0 d i ids phases="" tp
  t0=$(now_ms)
  tp=$t0
  # phase NAME: appends NAME=<ms since the previous phase> to the summary.
  phase() { phases+=" $1 $(($(now_ms) - tp))"; tp=$(now_ms); }
  # 1. Nothing may recreate or reschedule pods while they are torn down.
  stop kube-scheduler
  stop kube-controller-manager
  # 2. Let the kubelet delete the pods, so CNI DEL runs for every sandbox.
  if pid_of kube-apiserver >/dev/null && pid_of kubelet >/dev/null && [ -x "$BIN/kubectl" ]; then
    kc delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
    for ((i = 0; i < 600; i++)); do
      containers_gone && break
      pid_of kubelet >/dev/null || break
      sleep 0.1
    done
    if ! containers_gone; then
      log "WARNING: pods still running or CNI DEL pending after 60s; forcing (kubelet log tail follows)"
      TAIL_LINES=15 tail_logs kubelet
    fi
    phase pods
  fi
  # 3. Stop order matters: the apiserver hangs on SIGTERM once etcd is gone.
  stop kube-router
  stop kubelet
  stop kube-apiserver
  stop etcd
  phase daemons
  # 4. Whatever the kubelet left: kill and delete through containerd.
  if pid_of containerd >/dev/null; then
    for p in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill -a -s SIGKILL "$p" >/dev/null 2>&1 || true
    done
    for p in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks delete -f "$p" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  # 5. Shims and containers that outlived containerd.
  if [ -d "$RUN/containerd/runc" ] && command -v runc >/dev/null; then
    for d in "$RUN"/containerd/runc/*/; do
      [ -d "$d" ] || continue
      for p in $(runc --root "$d" list -q 2>/dev/null); do
        runc --root "$d" delete --force "$p" >/dev/null 2>&1 || true
      done
    done
  fi
  for p in $(our_shims); do
    log "killing leftover shim $p"
    kill -KILL "$p" 2>/dev/null || true
  done
  phase containers
  # 6. Mounts (kubelet volumes, container rootfs, pod netns) under the run dir.
  if [ -d "$RUN" ]; then
    for ((i = 0; i < 5; i++)); do
      [ -z "$(mounts_under "$RUN")" ] && break
      for f in $(mounts_under "$RUN"); do
        umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null || true
      done
    done
  fi
  phase mounts
  # 7. Host state outside the run dir.
  iptables_cleanup iptables
  iptables_cleanup ip6tables
  # kube-router's ipsets (the rules that used them are gone now).
  if command -v ipset >/dev/null; then
    for i in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)'); do
      ipset destroy "$i" 2>/dev/null || log "WARNING: could not destroy ipset $i"
    done
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE" 2>/dev/null || true; fi
  for d in /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods*; do
    if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  # libcni's result cache: ours, and the loopback results of our sandboxes
  # (left when CNI DEL never ran, e.g. after a kubelet crash).
  rm -f /var/lib/cni/results/"$NET_NAME"-* 2>/dev/null || true
  ids=$(find "$RUN"/containerd/{root,state}/io.containerd.grpc.v1.cri/sandboxes -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort -u) || true
  for p in $ids; do rm -f "/var/lib/cni/results/cni-loopback-$p-lo"; done
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$RUN/*" -delete 2>/dev/null || true
  fi
  if [ -r "$RUN/created-host-paths" ]; then
    while read -r d; do
      case $d in
        /var/lib/kubelet) rm -rf --one-file-system /var/lib/kubelet ;; # device-plugins socket and checkpoint
        *) find "$d" -depth -type d -empty -delete 2>/dev/null || true ;;
      esac
    done <"$RUN/created-host-paths"
  fi
  phase host
  # 8. The run dir itself, never across a mount that could not be removed.
  if [ -d "$RUN" ]; then
    if [ -n "${CODE_SANDBOXES_K8S_LOGS_DIR:-}" ] && [ -d "$LOGS" ]; then
      { mkdir -p "$CODE_SANDBOXES_K8S_LOGS_DIR" && cp -a "$LOGS/." "$CODE_SANDBOXES_K8S_LOGS_DIR/"; } || true
    fi
    if [ -n "$(mounts_under "$RUN")" ]; then
      log "ERROR: mounts left under $RUN: $(mounts_under "$RUN" | tr '\n' ' ')"
      left=1
    else
      rm -rf --one-file-system "$RUN"
    fi
    phase rm
  fi
  # 9. Report anything left.
  for d in "${DAEMONS[@]}"; do
    pid_of "$d" >/dev/null 2>&1 && { log "ERROR: $d still running"; left=1; }
  done
  [ -n "$(our_shims)" ] && { log "ERROR: containerd shims left: $(our_shims | tr '\n' ' ')"; left=1; }
  if [ "$(iptables-save 2>/dev/null | grep -c 'KUBE\|CNI')" != 0 ]; then
    log "ERROR: iptables rules left: $(iptables-save | grep 'KUBE\|CNI' | head -5 | tr '\n' ';')"
    left=1
  fi
  ip link show "$BRIDGE" >/dev/null 2>&1 && { log "ERROR: bridge $BRIDGE left"; left=1; }
  log "down in $(($(now_ms) - t0)) ms (ms per phase:$phases)$([ $left = 0 ] && echo '; nothing left')"
  return $left
}

cmd_down() {
  need_root
  lock
  do_down
}

# ---------------------------------------------------------------- status

cmd_status() {
  local d pid rc=0 any=0
  for d in "${DAEMONS[@]}"; do
    if pid=$(pid_of "$d"); then
      printf '%-24s running (pid %s)\n' "$d" "$pid"
      any=1
    else
      printf '%-24s stopped\n' "$d"
      rc=1
    fi
  done
  if pid_of kube-apiserver >/dev/null && [ -x "$BIN/kubectl" ]; then
    kc get nodes -o wide || rc=1
    kc get pods --all-namespaces -o wide 2>/dev/null || true
    node_ready || rc=1
  fi
  [ $any = 0 ] && { echo "cluster is down"; return 3; }
  [ $rc = 0 ] && cmd_env
  return $rc
}

usage() {
  sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

CMD=${1:-}
[ $# -gt 0 ] && shift
case $CMD in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  import) cmd_import "$@" ;;
  env) cmd_env ;;
  kubectl) exec "$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@" ;;
  *) usage ;;
esac
