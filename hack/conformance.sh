#!/usr/bin/env bash
# Drives a cluster only through stock clients. Uses the running cluster from hack/up.sh
# unless none answers, in which case it starts one.
source "$(dirname "$0")/lib.sh"

PORT="${MINIK8S_PORT:-6443}"
if ! curl -skf "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
  "$REPO_ROOT/hack/up.sh"
fi
cargo build --release --manifest-path "$REPO_ROOT/Cargo.toml" -p conformance
"$REPO_ROOT/target/release/conformance" --kubeconfig "$DATA_DIR/admin.kubeconfig"
