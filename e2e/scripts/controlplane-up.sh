#!/usr/bin/env bash
# Starts a real Kubernetes control plane for the e2e tests on 127.0.0.1:
# etcd, kube-apiserver (TLS, token auth, Node+RBAC authorization, service
# account token signing), kube-controller-manager and kube-scheduler, all from
# the multi-call binary built by build-tools.sh. Writes the admin kubeconfig to
# $STATE/kubeconfig and waits until /readyz answers. With MOLDAU_E2E_CLUSTER_DNS
# set (allowed only inside a network namespace a test created), CoreDNS serves
# cluster.local on that address from the API server too. Idempotent: when the plane
# recorded in $STATE is running and ready, it does nothing.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
t0=$(date +%s.%N)
KUBECONFIG_OUT="$STATE/kubeconfig"
PKI="$STATE/pki"
LOGS="$STATE/logs"

readyz() {
  curl -sf --max-time 3 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(cat "$PKI/admin.token")" \
    "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1
}

all_alive=1
for c in "${COMPONENTS[@]}"; do pid_alive "$c" || all_alive=0; done
if [[ $all_alive == 1 && -f "$KUBECONFIG_OUT" ]] && readyz; then
  echo "controlplane-up: already running (kubeconfig: $KUBECONFIG_OUT)" >&2
  exit 0
fi
if [[ -d "$STATE/pids" ]]; then
  echo "controlplane-up: found a partial or dead control plane, restarting it" >&2
  "$(dirname "${BASH_SOURCE[0]}")/controlplane-down.sh"
fi
if [[ -n "$CLUSTER_DNS" ]] && ! in_own_netns; then
  echo "controlplane-up: MOLDAU_E2E_CLUSTER_DNS is for a network namespace a test created (ip netns exec), not this machine's" >&2
  exit 1
fi
for c in "${COMPONENTS[@]}"; do
  [[ -x "$BIN/$c" ]] || { echo "controlplane-up: $BIN/$c missing; run e2e/scripts/build-tools.sh" >&2; exit 1; }
done
for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$SCHEDULER_PORT"; do
  if ss -Hltn "sport = :$p" | grep -q .; then
    echo "controlplane-up: port $p on this machine is in use (set MOLDAU_E2E_*_PORT)" >&2; exit 1
  fi
done

mkdir -p "$PKI" "$LOGS" "$STATE/pids" "$STATE/etcd"
chmod 700 "$STATE/etcd"

# --- certificates and credentials ------------------------------------------
ossl() { openssl "$@" 2>/dev/null; }
ossl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=moldau-e2e-ca" \
  -keyout "$PKI/ca.key" -out "$PKI/ca.crt"
cat > "$PKI/apiserver.ext" <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc
EXT
ossl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
  -keyout "$PKI/apiserver.key" -out "$PKI/apiserver.csr"
ossl x509 -req -in "$PKI/apiserver.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
  -days 3650 -extfile "$PKI/apiserver.ext" -out "$PKI/apiserver.crt"
ossl genrsa -out "$PKI/sa.key" 2048
ossl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
tok() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
admin_token="$(tok)"; kcm_token="$(tok)"; sched_token="$(tok)"
echo -n "$admin_token" > "$PKI/admin.token"
cat > "$PKI/tokens.csv" <<CSV
$admin_token,moldau-e2e-admin,moldau-e2e-admin,"system:masters"
$kcm_token,system:kube-controller-manager,system:kube-controller-manager
$sched_token,system:kube-scheduler,system:kube-scheduler
CSV
chmod 600 "$PKI"/*.key "$PKI/tokens.csv" "$PKI/admin.token"

write_kubeconfig() { # file user token
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: moldau-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $2
  user:
    token: $3
contexts:
- name: moldau-e2e
  context:
    cluster: moldau-e2e
    user: $2
    namespace: default
current-context: moldau-e2e
KC
  chmod 600 "$1"
}
write_kubeconfig "$STATE/kcm.kubeconfig" system:kube-controller-manager "$kcm_token"
write_kubeconfig "$STATE/scheduler.kubeconfig" system:kube-scheduler "$sched_token"

start() { # name args...
  local name="$1"; shift
  setsid "$BIN/$name" "$@" >"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/pids/$name"
}

wait_healthy() { # name url seconds [curl options...]: until url answers 2xx
  local name="$1" url="$2" secs="$3"; shift 3
  for _ in $(seq 1 $((secs * 10))); do
    curl -sf --max-time 2 "$@" "$url" >/dev/null 2>&1 && return 0
    pid_alive "$name" || { echo "controlplane-up: $name died:" >&2; tail -30 "$LOGS/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "controlplane-up: $name not healthy after ${secs}s" >&2; tail -30 "$LOGS/$name.log" >&2; exit 1
}

# --- etcd --------------------------------------------------------------------
etcd_url="http://127.0.0.1:$ETCD_PORT"
peer_url="http://127.0.0.1:$ETCD_PEER_PORT"
start etcd --name moldau-e2e --data-dir "$STATE/etcd" \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls "$peer_url" --initial-advertise-peer-urls "$peer_url" \
  --initial-cluster "moldau-e2e=$peer_url" --initial-cluster-state new \
  --unsafe-no-fsync --log-level warn
wait_healthy etcd "$etcd_url/health" 60

# --- kube-apiserver ----------------------------------------------------------
# --kubelet-preferred-address-types=InternalIP: the API server reaches nodes
# (kubectl logs/exec) only by their InternalIP, 127.0.0.1, never by resolving
# a hostname. The endpoint reconciler is off (see lib.sh).
start kube-apiserver \
  --etcd-servers="$etcd_url" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --token-auth-file="$PKI/tokens.csv" --anonymous-auth=true \
  --authorization-mode=Node,RBAC \
  --service-account-issuer="https://127.0.0.1:$APISERVER_PORT" \
  --service-account-key-file="$PKI/sa.pub" \
  --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --allow-privileged=true --profiling=false \
  --endpoint-reconciler-type=none \
  --kubelet-preferred-address-types=InternalIP

kcm_args=(
  --kubeconfig="$STATE/kcm.kubeconfig"
  --authentication-kubeconfig="$STATE/kcm.kubeconfig"
  --authorization-kubeconfig="$STATE/kcm.kubeconfig"
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT"
  --leader-elect=false
  --use-service-account-credentials=true
  --service-account-private-key-file="$PKI/sa.key"
  --root-ca-file="$PKI/ca.crt"
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key"
  --service-cluster-ip-range="$SERVICE_CIDR"
  --profiling=false
)
sched_args=(
  --kubeconfig="$STATE/scheduler.kubeconfig"
  --authentication-kubeconfig="$STATE/scheduler.kubeconfig"
  --authorization-kubeconfig="$STATE/scheduler.kubeconfig"
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT"
  --leader-elect=false --profiling=false
)

write_kubeconfig "$KUBECONFIG_OUT" moldau-e2e-admin "$admin_token"
for i in $(seq 1 1200); do
  readyz && break
  pid_alive kube-apiserver || { echo "controlplane-up: kube-apiserver died:" >&2; tail -30 "$LOGS/kube-apiserver.log" >&2; exit 1; }
  [[ $i == 1200 ]] && { echo "controlplane-up: kube-apiserver not ready after 120s" >&2; tail -30 "$LOGS/kube-apiserver.log" >&2; exit 1; }
  sleep 0.1
done
start kube-controller-manager "${kcm_args[@]}"
start kube-scheduler "${sched_args[@]}"
for c in kube-controller-manager:$KCM_PORT kube-scheduler:$SCHEDULER_PORT; do
  wait_healthy "${c%%:*}" "https://127.0.0.1:${c##*:}/healthz" 120 -k
done
# --- cluster DNS (network-namespace planes only) -----------------------------
if [[ -n "$CLUSTER_DNS" ]]; then
  cat > "$STATE/Corefile" <<COREFILE
cluster.local:53 {
    bind $CLUSTER_DNS
    errors
    kubernetes cluster.local {
        kubeconfig $KUBECONFIG_OUT moldau-e2e
        pods verified
    }
    ready 127.0.0.1:$DNS_READY_PORT
}
COREFILE
  start coredns -conf "$STATE/Corefile"
  wait_healthy coredns "http://127.0.0.1:$DNS_READY_PORT/ready" 60
fi
awk -v a="$t0" -v b="$(date +%s.%N)" -v k="$KUBECONFIG_OUT" \
  'BEGIN { printf "controlplane-up: ready in %.1fs; export KUBECONFIG=%s\n", b - a, k }' >&2
