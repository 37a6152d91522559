# Prometheus for a minik8s cluster (hack/up.sh --monitoring), run as a process on this
# machine and configured as Prometheus is on Kubernetes: ServiceAccount monitoring/prometheus
# with the chart's ClusterRole (hack/monitoring/rbac.yaml), a token from the TokenRequest
# API, the cluster CA, and discovery from the cluster's own API server with the chart's
# relabelling (hack/monitoring/prometheus.yml.in); rules in hack/monitoring/rules.yml.
# Debian's Prometheus has no kubernetes_sd_configs: `minik8s prometheus-sd`, run beside it
# with the same token, serves that discovery over HTTP SD.
# Sourced after lib.sh by hack/up.sh and hack/down.sh. Everything lives in
# <data-dir>/monitoring: prometheus.yml, rules.yml, token, prometheus.kubeconfig, data/,
# prometheus.log, sd.log and the pid files.
#
# MINIK8S_MONITORING_LISTEN            where Prometheus listens (default 127.0.0.1:9090)
# MINIK8S_MONITORING_SD_LISTEN         where the discovery is served (default 127.0.0.1:9099)
# MINIK8S_MONITORING_SCRAPE_INTERVAL   scrape and rule evaluation interval (default 15s)
# MINIK8S_MONITORING_TOKEN_DURATION    the token's lifetime (default 8760h; a new one is
#                                      issued at every hack/up.sh --monitoring)

MON_DIR="$DATA_DIR/monitoring"
MON_LISTEN="${MINIK8S_MONITORING_LISTEN:-127.0.0.1:9090}"
MON_SD_LISTEN="${MINIK8S_MONITORING_SD_LISTEN:-127.0.0.1:9099}"
MON_INTERVAL="${MINIK8S_MONITORING_SCRAPE_INTERVAL:-15s}"
MON_TOKEN_DURATION="${MINIK8S_MONITORING_TOKEN_DURATION:-8760h}"

# Writes <data-dir>/monitoring/prometheus.yml, and the kubeconfig the discovery uses, for
# the API server on 127.0.0.1:$1.
monitoring_config() {
  local port="$1"
  cat >"$MON_DIR/prometheus.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: minik8s
    cluster: {server: "https://127.0.0.1:$port", certificate-authority: "$DATA_DIR/pki/ca.crt"}
users:
  - name: monitoring/prometheus
    user: {tokenFile: "$MON_DIR/token"}
contexts:
  - name: prometheus
    context: {cluster: minik8s, user: monitoring/prometheus}
current-context: prometheus
EOF
  sed -e "s|@API_ADDRESS@|127.0.0.1:$port|g" \
    -e "s|@SD_LISTEN@|$MON_SD_LISTEN|g" \
    -e "s|@CA_FILE@|$DATA_DIR/pki/ca.crt|g" \
    -e "s|@TOKEN_FILE@|$MON_DIR/token|g" \
    -e "s|@RULES_FILE@|$MON_DIR/rules.yml|g" \
    -e "s|@LISTEN@|$MON_LISTEN|g" \
    -e "s|@INTERVAL@|$MON_INTERVAL|g" \
    "$REPO_ROOT/hack/monitoring/prometheus.yml.in" >"$MON_DIR/prometheus.yml"
  cp "$REPO_ROOT/hack/monitoring/rules.yml" "$MON_DIR/rules.yml"
}

# The Service monitoring/prometheus, so that cluster users find Prometheus the way they find
# it on Kubernetes. Its endpoints (an Endpoints and an EndpointSlice of our own, as for any
# Service without a selector) are written only when Prometheus listens on an address pods
# and the API server can reach: endpoints may not name a loopback address.
monitoring_service() {
  local kcfg="$1" host="${MON_LISTEN%:*}" port="${MON_LISTEN##*:}"
  KUBECONFIG="$kcfg" kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata:
  name: prometheus
  namespace: monitoring
  labels: {app.kubernetes.io/name: prometheus}
spec:
  ports: [{name: http, port: $port, targetPort: $port, protocol: TCP}]
EOF
  case "$host" in
    127.* | localhost | "") return 0 ;;
  esac
  KUBECONFIG="$kcfg" kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Endpoints
metadata:
  name: prometheus
  namespace: monitoring
  labels: {app.kubernetes.io/name: prometheus}
subsets:
  - addresses: [{ip: "$host"}]
    ports: [{name: http, port: $port, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: prometheus
  namespace: monitoring
  labels:
    app.kubernetes.io/name: prometheus
    kubernetes.io/service-name: prometheus
    endpointslice.kubernetes.io/managed-by: monitoring.minik8s.io
addressType: IPv4
endpoints: [{addresses: ["$host"], conditions: {ready: true}}]
ports: [{name: http, port: $port, protocol: TCP}]
EOF
}

# Starts Prometheus against the API server on 127.0.0.1:$1, as admin kubeconfig $2 sets it
# up, its discovery served by minik8s binary $3.
monitoring_up() {
  local port="$1" kcfg="$2" bin="$3"
  if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    log "prometheus is not installed (apt-get install prometheus; hack/packages.txt names it)"
    return 1
  fi
  mkdir -p "$MON_DIR/data"
  chmod 700 "$MON_DIR"
  monitoring_down
  local addr
  for addr in "$MON_LISTEN" "$MON_SD_LISTEN"; do
    if curl -s -o /dev/null "http://$addr/"; then
      log "something else answers on $addr: stop it, or set MINIK8S_MONITORING_LISTEN or _SD_LISTEN"
      return 1
    fi
  done
  KUBECONFIG="$kcfg" kubectl apply -f "$REPO_ROOT/hack/monitoring/rbac.yaml" >/dev/null
  (
    umask 077
    KUBECONFIG="$kcfg" kubectl -n monitoring create token prometheus \
      --duration="$MON_TOKEN_DURATION" >"$MON_DIR/token.new"
  )
  mv "$MON_DIR/token.new" "$MON_DIR/token"
  monitoring_config "$port"
  promtool check config "$MON_DIR/prometheus.yml" >/dev/null
  nohup "$bin" prometheus-sd --kubeconfig "$MON_DIR/prometheus.kubeconfig" \
    --listen "$MON_SD_LISTEN" >>"$MON_DIR/sd.log" 2>&1 &
  echo $! >"$MON_DIR/sd.pid"
  if ! wait_for 30 curl -sf "http://$MON_SD_LISTEN/sd/node"; then
    log "the service discovery did not start; last log lines:"
    tail -n 20 "$MON_DIR/sd.log" >&2
    return 1
  fi
  log "starting Prometheus on $MON_LISTEN (logs in $MON_DIR/prometheus.log)"
  nohup prometheus --config.file="$MON_DIR/prometheus.yml" \
    --storage.tsdb.path="$MON_DIR/data" \
    --storage.tsdb.retention.time=7d \
    --web.listen-address="$MON_LISTEN" >>"$MON_DIR/prometheus.log" 2>&1 &
  echo $! >"$MON_DIR/prometheus.pid"
  if ! wait_for 60 curl -sf "http://$MON_LISTEN/-/ready"; then
    log "Prometheus did not become ready; last log lines:"
    tail -n 20 "$MON_DIR/prometheus.log" >&2
    return 1
  fi
  monitoring_service "$kcfg"
}

# Stops what monitoring_up started.
monitoring_down() {
  if [[ -f "$MON_DIR/prometheus.pid" ]]; then
    stop_pidfile "$MON_DIR/prometheus.pid"
    log "stopped Prometheus"
  fi
  stop_pidfile "$MON_DIR/sd.pid"
}
