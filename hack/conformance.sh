#!/usr/bin/env bash
# Drives a cluster only through stock clients: kubectl 1.27-1.33, a kube-rs program and the
# official Python client (installed into a cached venv from PyPI on first use). Uses the
# running cluster from hack/up.sh unless none answers, in which case it starts one.
# Arguments go to the runner: --filter <substring>, --list, --jobs <n>, --verbose.
# Cases listed in conformance/known-failures.txt print XFAIL and do not fail the run.
source "$(dirname "$0")/lib.sh"

install_packages

PORT="${MINIK8S_PORT:-6443}"
if ! curl -skf "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
  "$REPO_ROOT/hack/up.sh"
fi
# $MINIK8S_CONFORMANCE_BIN: an already built suite instead of the release build.
if [[ -z "${MINIK8S_CONFORMANCE_BIN:-}" ]]; then
  cargo build --release --manifest-path "$REPO_ROOT/Cargo.toml" -p conformance
fi
"${MINIK8S_CONFORMANCE_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/conformance}" \
  --kubeconfig "$DATA_DIR/admin.kubeconfig" \
  --known-failures "$REPO_ROOT/conformance/known-failures.txt" \
  "$@"
