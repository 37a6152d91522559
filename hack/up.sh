#!/usr/bin/env bash
# Brings up an all-in-one minik8s cluster in the background and points kubectl at it.
# Data lives in $MINIK8S_DATA_DIR (default /var/lib/minik8s); running it again restarts the
# cluster on the same data. `--nodes N` (N >= 2) adds N-1 worker nodes, each in a network
# namespace of its own (see hack/multinode.sh). `--monitoring` also runs Prometheus in the
# cluster, scraping it (see hack/monitoring.sh). `--pod-network vxlan|auto|host-gw` picks the
# multi-node pod network (default host-gw, or $MINIK8S_POD_NETWORK): vxlan puts the workers
# on separate subnets behind a router namespace, reached through the VXLAN overlay.
source "$(dirname "$0")/lib.sh"

NODES=1
MONITORING=0
while (($#)); do
  case "$1" in
    --nodes) NODES="$2"; shift 2 ;;
    --nodes=*) NODES="${1#*=}"; shift ;;
    --monitoring) MONITORING=1; shift ;;
    --pod-network) export MINIK8S_POD_NETWORK="$2"; shift 2 ;;
    --pod-network=*) export MINIK8S_POD_NETWORK="${1#*=}"; shift ;;
    *) log "unknown argument $1 (usage: hack/up.sh [--nodes N] [--pod-network host-gw|vxlan|auto] [--monitoring])"; exit 2 ;;
  esac
done
case "${MINIK8S_POD_NETWORK:-host-gw}" in
  host-gw | vxlan | auto) ;;
  *) log "unknown pod network ${MINIK8S_POD_NETWORK} (host-gw, vxlan or auto)"; exit 2 ;;
esac
SERVER_EXTRA=()
if ((NODES > 1)); then
  source "$REPO_ROOT/hack/multinode.sh"
fi

PORT="${MINIK8S_PORT:-6443}"
install_packages
# $MINIK8S_BIN: an already built binary (e.g. a debug build) instead of the release build.
if [[ -z "${MINIK8S_BIN:-}" ]]; then
  log "building minik8s (release)"
  cargo build --release --manifest-path "$REPO_ROOT/Cargo.toml" -p minik8s
fi
BIN="${MINIK8S_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/minik8s}"
# `kubectl fn` (functions from source) is a kubectl plugin: a kubectl-fn on the PATH.
if [[ -x "$(dirname "$BIN")/kubectl-fn" ]]; then
  install -m 755 "$(dirname "$BIN")/kubectl-fn" /usr/local/bin/kubectl-fn
fi

mkdir -p "$DATA_DIR"
# Images are built from files on this machine, once; the node imports them when it starts.
read -r -a wanted <<<"${MINIK8S_IMAGES:-pause busybox python}"
# Prometheus runs as a pod of its own image.
if ((MONITORING)) && [[ " ${wanted[*]} " != *" prometheus "* ]]; then
  wanted+=(prometheus)
fi
missing=()
for image in "${wanted[@]}"; do
  [[ -f "$DATA_DIR/images/$image.tar" ]] || missing+=("$image")
done
if ((${#missing[@]})); then
  "$REPO_ROOT/hack/images.sh" "${missing[@]}"
fi
if [[ -f "$DATA_DIR/server.pid" ]] && kill -0 "$(cat "$DATA_DIR/server.pid")" 2>/dev/null; then
  log "stopping the running server first"
  "$REPO_ROOT/hack/down.sh"
fi

if ((NODES > 1)); then
  mn_check_alone
  mn_check_dns_port
  mn_check_pod_range
  mn_setup_network "$NODES"
  read -r -a SERVER_EXTRA <<<"$(mn_server_args)"
fi
log "starting the server (logs in $DATA_DIR/server.log)"
nohup "$BIN" server --data-dir "$DATA_DIR" --secure-port "$PORT" "${SERVER_EXTRA[@]}" >>"$DATA_DIR/server.log" 2>&1 &
echo $! >"$DATA_DIR/server.pid"

KCFG="$DATA_DIR/admin.kubeconfig"
if ! wait_for 60 curl -skf "https://127.0.0.1:$PORT/readyz"; then
  log "the server did not become ready; last log lines:"
  tail -n 30 "$DATA_DIR/server.log" >&2
  exit 1
fi
if ((NODES > 1)); then
  # The host node registers with its pod range first, so node IPAM never hands it out again.
  KUBECONFIG="$KCFG" wait_for 60 sh -c 'kubectl get nodes -o name | grep -q .' || true
  # A short-lived bootstrap token: the workers need it only until their first certificate.
  token="$("$BIN" token create --kubeconfig "$KCFG" --ttl 1h --description "hack/up.sh worker nodes")"
  mn_start_nodes "$NODES" "$BIN" "$PORT" "$token"
fi
# `kubectl wait --all` fails at once while no node is registered yet, so first wait for all to exist.
if ! wait_for 30 test -f "$KCFG" ||
  ! KUBECONFIG="$KCFG" wait_for 60 sh -c "test \$(kubectl get nodes -o name | wc -l) -ge $NODES" ||
  ! KUBECONFIG="$KCFG" kubectl wait --for=condition=Ready node --all --timeout=60s >/dev/null; then
  log "the node did not become Ready; last log lines:"
  tail -n 30 "$DATA_DIR/server.log" >&2
  if ((NODES > 1)); then
    KUBECONFIG="$KCFG" kubectl get nodes >&2 || true
    tail -n 15 "$DATA_DIR"/nodes/*/node.log >&2 || true
  fi
  exit 1
fi

if ((MONITORING)); then
  source "$REPO_ROOT/hack/monitoring.sh"
  monitoring_up "$PORT" "$KCFG" "$BIN"
fi

# Merge the admin context into ~/.kube/config (or $MINIK8S_MERGE_KUBECONFIG) and make it current.
TARGET="${MINIK8S_MERGE_KUBECONFIG:-$HOME/.kube/config}"
mkdir -p "$(dirname "$TARGET")"
touch "$TARGET"
merged="$(mktemp)"
KUBECONFIG="$KCFG:$TARGET" kubectl config view --flatten >"$merged"
install -m 600 "$merged" "$TARGET"
rm -f "$merged"
KUBECONFIG="$TARGET" kubectl config use-context minik8s >/dev/null
log "cluster is up"
((MONITORING)) && log "Prometheus: http://$MON_LISTEN"
KUBECONFIG="$TARGET" kubectl get ns
