# Shared settings for the e2e control-plane scripts (sourced).
# shellcheck shell=bash
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$E2E_DIR/.." && pwd)"
STATE="${MOLDAU_E2E_STATE:-$E2E_DIR/.state}"
BIN="${MOLDAU_CACHE:-$HOME/.cache/moldau}/bin"
# All listeners are on 127.0.0.1; ports can be moved if they clash.
ETCD_PORT="${MOLDAU_E2E_ETCD_PORT:-12379}"
ETCD_PEER_PORT="${MOLDAU_E2E_ETCD_PEER_PORT:-12380}"
APISERVER_PORT="${MOLDAU_E2E_APISERVER_PORT:-16443}"
KCM_PORT="${MOLDAU_E2E_KCM_PORT:-10257}"
SCHEDULER_PORT="${MOLDAU_E2E_SCHEDULER_PORT:-10259}"
# Never dialed by anything: Services get ClusterIPs from here, but nothing in
# the e2e setup (no kube-proxy, no DNS) routes them. A loopback range is used
# so that even an accidental dial stays on this machine. The API server's
# own endpoint reconciler is off (--endpoint-reconciler-type=none): the API
# rejects loopback addresses in Endpoints, and nothing uses them here.
SERVICE_CIDR="${MOLDAU_E2E_SERVICE_CIDR:-127.96.0.0/16}"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)
# Cluster DNS: set only inside a network namespace the test created (see
# in_own_netns), where pods have routable addresses. CoreDNS then serves
# cluster.local on this address, port 53, from the API server. Not on the
# default loopback plane: the API server refuses loopback addresses in
# EndpointSlices, so per-pod and headless-Service names could not resolve there.
CLUSTER_DNS="${MOLDAU_E2E_CLUSTER_DNS:-}"
DNS_READY_PORT="${MOLDAU_E2E_DNS_READY_PORT:-18181}"
if [[ -n "$CLUSTER_DNS" ]]; then COMPONENTS+=(coredns); fi

# True when this shell runs in a network namespace created with `ip netns`
# (one a test created), not the machine's own.
in_own_netns() { [[ -n "$(ip netns identify 2>/dev/null)" ]]; }

pid_alive() { [[ -f "$STATE/pids/$1" ]] && kill -0 "$(cat "$STATE/pids/$1")" 2>/dev/null; }

stop_component() { # name
  local f="$STATE/pids/$1" pid
  [[ -f "$f" ]] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}
