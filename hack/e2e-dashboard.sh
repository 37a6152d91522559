#!/usr/bin/env bash
# The web dashboard in a real browser: headless Chromium (Debian's package), driven through
# the DevTools protocol by conformance/src/bin/dashboard-e2e, signs in with a ServiceAccount
# token, opens every page against the running cluster (hack/up.sh's, the one in
# $MINIK8S_DATA_DIR; one is started if none answers), checks that objects created and
# deleted with kubectl show up without a reload, and prints the first-load and
# update-latency figures. Screenshots go to $MINIK8S_DASHBOARD_OUT (default
# target/dashboard-e2e): look at them.
source "$(dirname "$0")/lib.sh"

install_packages
PORT="${MINIK8S_PORT:-6443}"
if ! curl -skf "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
  "$REPO_ROOT/hack/up.sh"
fi
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
# Beside an already built conformance suite (hack/test.sh's ci build), or built here.
BIN="${MINIK8S_DASHBOARD_E2E_BIN:-}"
if [[ -z "$BIN" && -n "${MINIK8S_CONFORMANCE_BIN:-}" ]]; then
  BIN="$(dirname "$MINIK8S_CONFORMANCE_BIN")/dashboard-e2e"
fi
if [[ -z "$BIN" ]]; then
  cargo build --release --manifest-path "$REPO_ROOT/Cargo.toml" -p conformance --bin dashboard-e2e
  BIN="$TARGET/release/dashboard-e2e"
fi
OUT="${MINIK8S_DASHBOARD_OUT:-$TARGET/dashboard-e2e}"
rm -rf "$OUT"
mkdir -p "$OUT"
"$BIN" --kubeconfig "$DATA_DIR/admin.kubeconfig" --out "$OUT"
log "dashboard screenshots: $OUT"
