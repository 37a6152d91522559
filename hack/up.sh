#!/usr/bin/env bash
# Brings up an all-in-one minik8s cluster in the background and points kubectl at it.
# Data lives in $MINIK8S_DATA_DIR (default /var/lib/minik8s); running it again restarts the
# cluster on the same data.
source "$(dirname "$0")/lib.sh"

PORT="${MINIK8S_PORT:-6443}"
install_packages
log "building minik8s (release)"
cargo build --release --manifest-path "$REPO_ROOT/Cargo.toml" -p minik8s
BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/minik8s"

mkdir -p "$DATA_DIR"
# Images are built from files on this machine, once; the node imports them when it starts.
read -r -a wanted <<<"${MINIK8S_IMAGES:-pause busybox python}"
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

log "starting the server (logs in $DATA_DIR/server.log)"
nohup "$BIN" server --data-dir "$DATA_DIR" --secure-port "$PORT" >>"$DATA_DIR/server.log" 2>&1 &
echo $! >"$DATA_DIR/server.pid"

KCFG="$DATA_DIR/admin.kubeconfig"
if ! wait_for 60 curl -skf "https://127.0.0.1:$PORT/readyz"; then
  log "the server did not become ready; last log lines:"
  tail -n 30 "$DATA_DIR/server.log" >&2
  exit 1
fi
# `kubectl wait --all` fails at once while no node is registered yet, so first wait for one to exist.
if ! wait_for 30 test -f "$KCFG" ||
  ! KUBECONFIG="$KCFG" wait_for 60 sh -c 'kubectl get nodes -o name | grep -q .' ||
  ! KUBECONFIG="$KCFG" kubectl wait --for=condition=Ready node --all --timeout=60s >/dev/null; then
  log "the node did not become Ready; last log lines:"
  tail -n 30 "$DATA_DIR/server.log" >&2
  exit 1
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
KUBECONFIG="$TARGET" kubectl get ns
