#!/usr/bin/env bash
# Benchmarks. They print figures and never fail on them (a non-zero exit means the benchmark
# itself could not run). Each subcommand builds in release mode first.
#
#   hack/bench.sh api [ARGS...]   API server on both stores: idle RSS, durable creates/s with 1
#                                 and 64 clients, GET/LIST latency, watch delivery latency.
#                                 ARGS go to `minik8s-bench api` (e.g. --backend sqlite).
#   hack/bench.sh authz [ARGS...] What authorization costs: creates/s and GETs/s of a
#                                 ServiceAccount-token client allowed by `edit` (among 400 other
#                                 bindings), --authorization-mode=AlwaysAllow against Node,RBAC.
#   hack/bench.sh metrics [ARGS...] What monitoring costs the API: creates/s with 1 and 64
#                                 clients on a server left alone against one whose /metrics is
#                                 scraped every 5 s (--scrape-interval), rounds alternating.
#   hack/bench.sh pods [ARGS...]  Pod startup latency on one node with a warm image: create to
#                                 Running through a watch, 1 pod at a time and 30 at once.
#   hack/bench.sh scale [ARGS...] Control plane with 100 and 1,000 hollow nodes and 30 pods per
#                                 node in Deployments: pods scheduled per second, time until all
#                                 are Running, API latency during the storm, server RSS.
#   hack/bench.sh watchers [ARGS...] 1,000 watches of pods (10 namespaces, 30,000 pods) while
#                                 pods churn: server memory per watcher, delivery p50/p99.
#   hack/bench.sh functions [ARGS...] knative-lite on the running cluster (hack/up.sh starts one
#                                 if none answers): cold starts of a Function (pool) and of a
#                                 Knative Service, the router's added latency and throughput
#                                 against the pod itself, a 0 -> 200 clients step, back to zero.
#   hack/bench.sh hpa [ARGS...]   HorizontalPodAutoscaler: on the running cluster (hack/up.sh starts
#                                 one if none answers), a CPU load step: time to the first rescale,
#                                 to the final count, and back to minReplicas once idle; then on a
#                                 server of its own, controller CPU per sync at 1,000 HPAs.
#   hack/bench.sh storage [ARGS...] On the running cluster (hack/up.sh starts one if none
#                                 answers): claim to Bound through the local-path provisioner
#                                 (p50/p99 of 100 claims, one at a time and all at once) against
#                                 static volumes, and a StatefulSet of 20 to all Ready
#                                 (OrderedReady, Parallel) against a Deployment.
#   hack/bench.sh workflows [ARGS...] On the running cluster (hack/up.sh starts one if none
#                                 answers): a 10-Task chain of a warm function through the
#                                 gateway against the 10 calls made directly (per-transition
#                                 overhead p50/p99), and 100 runs at once (runs/s, none lost,
#                                 no Task called twice).
#   hack/bench.sh proxy [ARGS...] The proxier (iptables; --mode nftables) with 1k and 10k Services
#                                 in a network namespace it creates: render and restore time,
#                                 ruleset size, API write to rule in the kernel for one change.
source "$(dirname "$0")/lib.sh"

TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"

usage() {
  sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//' >&2
}

build_release() {
  log "building $* (release)"
  local pkgs=()
  for p in "$@"; do pkgs+=(-p "$p"); done
  cargo build --release --manifest-path "$REPO_ROOT/Cargo.toml" "${pkgs[@]}"
}

cmd="${1:-}"
if (($#)); then shift; fi
case "$cmd" in
  api)
    install_packages
    build_release minik8s minik8s-bench
    log "running the API benchmark (both stores; a few minutes)"
    "$TARGET_DIR/release/minik8s-bench" api --server-bin "$TARGET_DIR/release/minik8s" "$@"
    ;;
  authz)
    build_release minik8s minik8s-bench
    log "running the authorization benchmark (AlwaysAllow against Node,RBAC; a few minutes)"
    "$TARGET_DIR/release/minik8s-bench" authz --server-bin "$TARGET_DIR/release/minik8s" "$@"
    ;;
  metrics)
    build_release minik8s minik8s-bench
    log "running the metrics-scraping benchmark (a few minutes)"
    "$TARGET_DIR/release/minik8s-bench" metrics --server-bin "$TARGET_DIR/release/minik8s" "$@"
    ;;
  pods)
    install_packages
    build_release minik8s minik8s-bench
    log "running the pod startup benchmark (one node, warm image)"
    "$TARGET_DIR/release/minik8s-bench" pods --server-bin "$TARGET_DIR/release/minik8s" "$@"
    ;;
  scale)
    build_release minik8s minik8s-bench
    log "running the scale benchmark (hollow nodes; many minutes for 1,000 nodes)"
    "$TARGET_DIR/release/minik8s-bench" scale --server-bin "$TARGET_DIR/release/minik8s" "$@"
    ;;
  watchers)
    build_release minik8s minik8s-bench
    log "running the watchers benchmark (a few minutes)"
    "$TARGET_DIR/release/minik8s-bench" watchers --server-bin "$TARGET_DIR/release/minik8s" "$@"
    ;;
  functions)
    install_packages
    PORT="${MINIK8S_PORT:-6443}"
    if ! curl -skf "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
      "$REPO_ROOT/hack/up.sh"
    fi
    build_release minik8s-bench
    log "running the functions benchmark (a few minutes)"
    "$TARGET_DIR/release/minik8s-bench" functions --kubeconfig "$DATA_DIR/admin.kubeconfig" "$@"
    ;;
  hpa)
    install_packages
    PORT="${MINIK8S_PORT:-6443}"
    if ! curl -skf "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
      "$REPO_ROOT/hack/up.sh"
    fi
    build_release minik8s minik8s-bench
    log "running the HPA benchmark (several minutes)"
    "$TARGET_DIR/release/minik8s-bench" hpa --kubeconfig "$DATA_DIR/admin.kubeconfig" \
      --server-bin "$TARGET_DIR/release/minik8s" "$@"
    ;;
  storage)
    install_packages
    PORT="${MINIK8S_PORT:-6443}"
    if ! curl -skf "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
      "$REPO_ROOT/hack/up.sh"
    fi
    build_release minik8s-bench
    log "running the storage benchmark (a few minutes)"
    "$TARGET_DIR/release/minik8s-bench" storage --kubeconfig "$DATA_DIR/admin.kubeconfig" "$@"
    ;;
  workflows)
    install_packages
    PORT="${MINIK8S_PORT:-6443}"
    if ! curl -skf "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
      "$REPO_ROOT/hack/up.sh"
    fi
    build_release minik8s-bench
    log "running the workflows benchmark (a few minutes)"
    "$TARGET_DIR/release/minik8s-bench" workflows --kubeconfig "$DATA_DIR/admin.kubeconfig" "$@"
    ;;
  proxy)
    build_release minik8s-bench
    log "running the proxy benchmark (network namespace; a few minutes)"
    "$TARGET_DIR/release/minik8s-bench" proxy "$@"
    ;;
  -h | --help | help)
    usage
    ;;
  *)
    usage
    exit 2
    ;;
esac
