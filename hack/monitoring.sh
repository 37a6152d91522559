# Prometheus for a minik8s cluster (hack/up.sh --monitoring), run as Prometheus runs on
# Kubernetes (the prometheus-community chart's server): Deployment monitoring/prometheus of
# image quay.io/prometheus/prometheus (built from this machine's Prometheus, see
# `minik8s image build prometheus`), ServiceAccount monitoring/prometheus with the chart's
# ClusterRole (hack/monitoring/rbac.yaml) and its projected token, its configuration and rules
# in ConfigMap monitoring/prometheus (hack/monitoring/prometheus.yml.in, rules.yml), and
# Service monitoring/prometheus in front of it, through which the API server's service proxy
# (and the dashboard) reach it.
# The pod is on the host network of the node on this machine: the components it scrapes
# at their default, loopback addresses (the scheduler, the controller-manager, kube-proxy,
# the cluster DNS) and the discovery below are there. It listens on the pod's IP, the node's
# InternalIP, and nowhere else.
# Debian's Prometheus has no kubernetes_sd_configs: `minik8s prometheus-sd`, a process on this
# machine with a token of the same ServiceAccount, serves that discovery over HTTP SD.
# Sourced after lib.sh by hack/up.sh and hack/down.sh. Files live in <data-dir>/monitoring:
# prometheus.yml and rules.yml (what the ConfigMap holds), data/ (the pod's hostPath
# volume), address (where Prometheus listens), and the discovery's token,
# prometheus.kubeconfig, sd.log and sd.pid.
#
# MINIK8S_MONITORING_PORT              Prometheus's port on the node's address (default 9090)
# MINIK8S_MONITORING_SD_LISTEN         where the discovery is served (default 127.0.0.1:9099)
# MINIK8S_MONITORING_SCRAPE_INTERVAL   scrape and rule evaluation interval (default 15s)
# MINIK8S_MONITORING_TOKEN_DURATION    the discovery's token's lifetime (default 8760h; a new
#                                      one is issued at every hack/up.sh --monitoring)

MON_DIR="$DATA_DIR/monitoring"
MON_PORT="${MINIK8S_MONITORING_PORT:-9090}"
MON_SD_LISTEN="${MINIK8S_MONITORING_SD_LISTEN:-127.0.0.1:9099}"
MON_INTERVAL="${MINIK8S_MONITORING_SCRAPE_INTERVAL:-15s}"
MON_TOKEN_DURATION="${MINIK8S_MONITORING_TOKEN_DURATION:-8760h}"
# Where Prometheus listens (<node InternalIP>:<port>), once monitoring_up has started it.
MON_LISTEN="$(cat "$MON_DIR/address" 2>/dev/null || true)"
# The uid and gid Prometheus runs as: nobody, as upstream's image and the chart.
MON_UID=65534

# The node on this machine: "<name> <InternalIP>" of the node whose InternalIP is an address
# of this machine's (the workers of hack/up.sh --nodes live in network namespaces of their own).
monitoring_host_node() {
  local kcfg="$1" addrs name ip
  addrs=" $(ip -o addr show | awk '{split($4, a, "/"); printf "%s ", a[1]}')"
  while read -r name ip; do
    if [[ -n "$ip" && "$addrs" == *" $ip "* ]]; then
      printf '%s %s\n' "$name" "$ip"
      return 0
    fi
  done < <(KUBECONFIG="$kcfg" kubectl get nodes -o \
    jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
  return 1
}

# Writes <data-dir>/monitoring/prometheus.yml and rules.yml, for the API server on
# 127.0.0.1:$1, and the kubeconfig the discovery uses.
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
    -e "s|@LISTEN@|$MON_LISTEN|g" \
    -e "s|@INTERVAL@|$MON_INTERVAL|g" \
    "$REPO_ROOT/hack/monitoring/prometheus.yml.in" >"$MON_DIR/prometheus.yml"
  cp "$REPO_ROOT/hack/monitoring/rules.yml" "$MON_DIR/rules.yml"
}

# The image the cluster's node imported from <data-dir>/images/prometheus.tar.
monitoring_image() {
  python3 -c '
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    index = json.load(t.extractfile("index.json"))
print(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])' \
    "$DATA_DIR/images/prometheus.tar"
}

# ConfigMap, Deployment and Service monitoring/prometheus, as admin kubeconfig $1 applies
# them, for the pod on node $2. A change of the configuration rolls the pod (its checksum is
# an annotation of the template, as the chart does); Recreate, as the chart: the new pod
# needs the old one's port and data.
monitoring_apply() {
  local kcfg="$1" node="$2" image checksum
  image="$(monitoring_image)"
  checksum="$(cat "$MON_DIR/prometheus.yml" "$MON_DIR/rules.yml" | sha256sum | cut -d' ' -f1)"
  KUBECONFIG="$kcfg" kubectl -n monitoring create configmap prometheus \
    --from-file=prometheus.yml="$MON_DIR/prometheus.yml" \
    --from-file=rules.yml="$MON_DIR/rules.yml" --dry-run=client -o yaml |
    KUBECONFIG="$kcfg" kubectl apply -f - >/dev/null
  KUBECONFIG="$kcfg" kubectl apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: prometheus
  namespace: monitoring
  labels: {app.kubernetes.io/name: prometheus}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector:
    matchLabels: {app.kubernetes.io/name: prometheus}
  template:
    metadata:
      labels: {app.kubernetes.io/name: prometheus}
      annotations: {checksum/config: "$checksum"}
    spec:
      serviceAccountName: prometheus
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      nodeSelector: {kubernetes.io/hostname: "$node"}
      securityContext: {runAsUser: $MON_UID, runAsGroup: $MON_UID, runAsNonRoot: true}
      terminationGracePeriodSeconds: 30
      containers:
        - name: prometheus-server
          image: "$image"
          imagePullPolicy: IfNotPresent
          args:
            - --config.file=/etc/config/prometheus.yml
            - --storage.tsdb.path=/data
            - --storage.tsdb.retention.time=7d
            - --web.listen-address=\$(POD_IP):$MON_PORT
          env:
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
          ports: [{name: http, containerPort: $MON_PORT}]
          readinessProbe:
            httpGet: {path: /-/ready, port: $MON_PORT}
            periodSeconds: 5
            timeoutSeconds: 4
          livenessProbe:
            httpGet: {path: /-/healthy, port: $MON_PORT}
            initialDelaySeconds: 30
            periodSeconds: 15
            timeoutSeconds: 10
          volumeMounts:
            - {name: config-volume, mountPath: /etc/config, readOnly: true}
            - {name: storage-volume, mountPath: /data}
      volumes:
        - name: config-volume
          configMap: {name: prometheus}
        - name: storage-volume
          hostPath: {path: "$MON_DIR/data", type: Directory}
---
apiVersion: v1
kind: Service
metadata:
  name: prometheus
  namespace: monitoring
  labels: {app.kubernetes.io/name: prometheus}
spec:
  selector: {app.kubernetes.io/name: prometheus}
  ports: [{name: http, port: $MON_PORT, targetPort: http, protocol: TCP}]
EOF
  # The EndpointSlice an older hack/monitoring.sh wrote for the Service when it had no
  # selector: the endpoint slice controller leaves slices it does not manage alone.
  KUBECONFIG="$kcfg" kubectl -n monitoring delete endpointslices.discovery.k8s.io \
    -l endpointslice.kubernetes.io/managed-by=monitoring.minik8s.io --ignore-not-found >/dev/null
}

# What the pod says about itself when it does not become ready.
monitoring_report() {
  local kcfg="$1"
  KUBECONFIG="$kcfg" kubectl -n monitoring get pods -l app.kubernetes.io/name=prometheus -o wide >&2 || true
  KUBECONFIG="$kcfg" kubectl -n monitoring describe pods -l app.kubernetes.io/name=prometheus 2>&1 |
    tail -n 20 >&2 || true
  KUBECONFIG="$kcfg" kubectl -n monitoring logs deployment/prometheus --tail=20 >&2 || true
}

# Starts Prometheus against the API server on 127.0.0.1:$1, as admin kubeconfig $2 sets it
# up, its discovery served by minik8s binary $3.
monitoring_up() {
  local port="$1" kcfg="$2" bin="$3" node ip
  if ! command -v promtool >/dev/null; then
    log "promtool is not installed (apt-get install prometheus; hack/packages.txt names it)"
    return 1
  fi
  if [[ ! -f "$DATA_DIR/images/prometheus.tar" ]]; then
    log "no $DATA_DIR/images/prometheus.tar (hack/images.sh prometheus, before the node starts)"
    return 1
  fi
  mkdir -p "$MON_DIR/data"
  chmod 700 "$MON_DIR"
  # The pod runs as nobody; its data is the hostPath $MON_DIR/data.
  chown -R "$MON_UID:$MON_UID" "$MON_DIR/data"
  monitoring_down
  if curl -s -o /dev/null "http://$MON_SD_LISTEN/"; then
    log "something else answers on $MON_SD_LISTEN: stop it, or set MINIK8S_MONITORING_SD_LISTEN"
    return 1
  fi
  if ! read -r node ip < <(monitoring_host_node "$kcfg"); then
    log "no node of the cluster has an address of this machine's: Prometheus runs on it"
    return 1
  fi
  MON_LISTEN="$ip:$MON_PORT"
  KUBECONFIG="$kcfg" kubectl apply -f "$REPO_ROOT/hack/monitoring/rbac.yaml" >/dev/null
  (
    umask 077
    KUBECONFIG="$kcfg" kubectl -n monitoring create token prometheus \
      --duration="$MON_TOKEN_DURATION" >"$MON_DIR/token.new"
  )
  mv "$MON_DIR/token.new" "$MON_DIR/token"
  monitoring_config "$port"
  # The credentials and CA it names are the pod's (its ServiceAccount volume): syntax only.
  promtool check config --syntax-only "$MON_DIR/prometheus.yml" >/dev/null
  promtool check rules "$MON_DIR/rules.yml" >/dev/null
  nohup "$bin" prometheus-sd --kubeconfig "$MON_DIR/prometheus.kubeconfig" \
    --listen "$MON_SD_LISTEN" >>"$MON_DIR/sd.log" 2>&1 &
  echo $! >"$MON_DIR/sd.pid"
  if ! wait_for 30 curl -sf "http://$MON_SD_LISTEN/sd/node"; then
    log "the service discovery did not start; last log lines:"
    tail -n 20 "$MON_DIR/sd.log" >&2
    return 1
  fi
  log "starting Prometheus (Deployment monitoring/prometheus) on node $node, $MON_LISTEN"
  monitoring_apply "$kcfg" "$node"
  if ! KUBECONFIG="$kcfg" kubectl -n monitoring rollout status deployment/prometheus \
    --timeout=120s >/dev/null || ! wait_for 30 curl -sf "http://$MON_LISTEN/-/ready"; then
    log "Prometheus did not become ready:"
    monitoring_report "$kcfg"
    return 1
  fi
  echo "$MON_LISTEN" >"$MON_DIR/address"
}

# Stops what monitoring_up started on this machine: the discovery (and a Prometheus process
# an older hack/monitoring.sh started). The pod stops with the node.
monitoring_down() {
  if [[ -f "$MON_DIR/prometheus.pid" ]]; then
    stop_pidfile "$MON_DIR/prometheus.pid"
    log "stopped Prometheus"
  fi
  stop_pidfile "$MON_DIR/sd.pid"
}
