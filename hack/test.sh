#!/usr/bin/env bash
# Every test: first that this machine has no package a fresh one set up by hack/lib.sh would
# lack, then unit and integration tests of the workspace (they start their own etcd and
# servers), then the conformance suite against a fresh cluster from hack/up.sh, the
# dashboard in a headless browser against that cluster (screenshots in
# target/dashboard-e2e), the fake device plugin on that cluster's node, functions across a
# restart of that cluster's server, then the cross-node checks on a 3-node cluster, once per
# proxy mode and once over VXLAN, storage on a 3-node cluster, and Prometheus scraping a
# single-node cluster (hack/up.sh --monitoring).
source "$(dirname "$0")/lib.sh"

install_packages
# Nothing installed by hand may stand in for a missing install step.
"$REPO_ROOT/hack/verify-packages.sh"
cd "$REPO_ROOT"
log "cargo test"
# The ci profile is release without thin local LTO (Cargo.toml): the build is most of CI's time.
cargo test --profile ci --workspace --all-targets
# That built every binary already. Building one package alone resolves its dependencies'
# features apart from the workspace's and compiles most of them again (7 minutes on CI).
export MINIK8S_BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/ci/minik8s"
export MINIK8S_CONFORMANCE_BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/ci/conformance"
log "conformance against a fresh cluster"
export MINIK8S_DATA_DIR="$(mktemp -d /tmp/minik8s-conformance.XXXXXX)"
export MINIK8S_PORT="${MINIK8S_CONFORMANCE_PORT:-16443}"
export MINIK8S_MERGE_KUBECONFIG="$MINIK8S_DATA_DIR/kubeconfig"
# python:3 runs the in-cluster clients (the official Python client, a kube-rs program).
export MINIK8S_IMAGES="pause busybox python"
# Test traffic stays on the machine: cluster DNS forwards no names to the host's resolvers.
export MINIK8S_DNS_RESOLV_CONF=/dev/null
trap '"$REPO_ROOT/hack/down.sh" >/dev/null 2>&1; rm -rf "$MINIK8S_DATA_DIR"' EXIT
"$REPO_ROOT/hack/up.sh"
"$REPO_ROOT/hack/conformance.sh"
log "the dashboard in headless Chromium, against the same cluster"
"$REPO_ROOT/hack/e2e-dashboard.sh"
log "devices: the fake device plugin on the same cluster's node"
"$REPO_ROOT/hack/e2e-devices.sh"
log "functions across a restart of the server"
"$REPO_ROOT/hack/e2e-functions.sh"
# One cluster at a time: the multi-node cluster's host node uses the same pod range.
"$REPO_ROOT/hack/down.sh" >/dev/null 2>&1 || true
log "cross-node networking against a fresh 3-node cluster"
"$REPO_ROOT/hack/e2e-net.sh"
log "the same with every proxier in nftables mode"
MINIK8S_PROXY_MODE=nftables "$REPO_ROOT/hack/e2e-net.sh"
log "the same on a routed network (no shared L2) through the VXLAN pod network"
MINIK8S_POD_NETWORK=vxlan "$REPO_ROOT/hack/e2e-net.sh"
log "storage across nodes and a StatefulSet across a kill -9 of the server, on a 3-node cluster"
"$REPO_ROOT/hack/e2e-storage.sh"
log "monitoring: Prometheus from hack/up.sh --monitoring scrapes every target"
MINIK8S_IMAGES_DIR="$MINIK8S_DATA_DIR/images" "$REPO_ROOT/hack/e2e-monitoring.sh"
