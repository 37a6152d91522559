#!/usr/bin/env bash
# Stops the cluster started by hack/up.sh and keeps its data; --purge deletes the data too.
source "$(dirname "$0")/lib.sh"

purge=0
[[ "${1:-}" == "--purge" ]] && purge=1

source "$REPO_ROOT/hack/monitoring.sh"
monitoring_down
if [[ -f "$DATA_DIR/server.pid" ]]; then
  stop_pidfile "$DATA_DIR/server.pid"
  log "stopped"
fi
# Pods stop with the node; their objects stay in the API and come back with hack/up.sh.
BIN="${MINIK8S_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/minik8s}"
TEARDOWN_EXTRA=()
multinode=0
if [[ -f "$DATA_DIR/multinode.env" ]]; then
  multinode=1
  source "$REPO_ROOT/hack/multinode.sh"
  TEARDOWN_EXTRA=(--bridge "$MN_HOST_BRIDGE" --cgroup-root "$MN_HOST_CGROUP")
  mn_down "$BIN"
fi
if [[ -x "$BIN" && -d "$DATA_DIR/containerd" ]]; then
  "$BIN" teardown --data-dir "$DATA_DIR" "${TEARDOWN_EXTRA[@]}" >>"$DATA_DIR/server.log" 2>&1 || log "teardown reported errors (see $DATA_DIR/server.log)"
fi
if ((multinode)); then
  mn_remove_cgroups
  mn_cleanup_host_iptables "$BIN"
fi
if ((purge)); then
  rm -rf "$DATA_DIR"
  kubectl config delete-context minik8s >/dev/null 2>&1 || true
  kubectl config delete-cluster minik8s >/dev/null 2>&1 || true
  kubectl config delete-user minik8s-admin >/dev/null 2>&1 || true
  log "purged $DATA_DIR"
fi
