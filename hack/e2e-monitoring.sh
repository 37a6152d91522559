#!/usr/bin/env bash
# Monitoring out of the box, against a fresh single-node cluster from hack/up.sh --monitoring,
# through Prometheus's HTTP API on the address its pod listens on (the node's InternalIP):
#   - Prometheus runs as a pod of Deployment monitoring/prometheus, Running and Ready, on the
#     host network; Service monitoring/prometheus has it as its endpoint, and the API
#     server's service proxy reaches it (as the dashboard does);
#   - the generated configuration and rules pass promtool, Prometheus loaded them, and the
#     alerts fire on made-up series as hack/monitoring/rules_test.yml expects;
#   - every target Prometheus discovers from the API server is up (the API server, the
#     kubelet and its cAdvisor through the node proxy, the function gateway, a pod that asks
#     to be scraped with prometheus.io/* annotations, Prometheus itself);
#   - PromQL for a pod's CPU (container_cpu_usage_seconds_total from cAdvisor) returns data,
#     and the pod's own metric is there;
#   - the alerting rules are loaded; `kubectl top pod` still works (the metrics API);
#   - hack/down.sh stops Prometheus and the discovery.
# Uses its own data dir and port; everything it starts is removed on exit (hack/down.sh --purge).
# Ports 9090, 8080, 80 and 10250 are the cluster's: run it while no other cluster runs here.
source "$(dirname "$0")/lib.sh"

export MINIK8S_DATA_DIR="$(mktemp -d /tmp/minik8s-monitoring.XXXXXX)"
export MINIK8S_PORT="${MINIK8S_MONITORING_E2E_PORT:-16473}"
export MINIK8S_MERGE_KUBECONFIG="$MINIK8S_DATA_DIR/kubeconfig"
export MINIK8S_IMAGES="pause busybox"
export MINIK8S_DNS_RESOLV_CONF=/dev/null
export MINIK8S_MONITORING_SCRAPE_INTERVAL=5s
DATA_DIR="$MINIK8S_DATA_DIR"
# Images: those of another data dir when $MINIK8S_IMAGES_DIR names one (hack/test.sh passes
# the conformance cluster's), else hack/up.sh builds them.
if [[ -n "${MINIK8S_IMAGES_DIR:-}" ]]; then
  mkdir -p "$DATA_DIR/images"
  cp "$MINIK8S_IMAGES_DIR"/{pause,busybox,prometheus}.tar "$DATA_DIR/images/" 2>/dev/null || true
fi
if [[ -z "${MINIK8S_KEEP:-}" ]]; then
  trap '"$REPO_ROOT/hack/down.sh" --purge >/dev/null 2>&1 || true' EXIT
fi
"$REPO_ROOT/hack/up.sh" --monitoring
source "$REPO_ROOT/hack/monitoring.sh"
export KUBECONFIG="$DATA_DIR/admin.kubeconfig"
PROM="http://$MON_LISTEN"
NS=e2e-monitoring

fail() {
  log "FAIL: $*"
  curl -s "$PROM/api/v1/targets" | python3 -c '
import json, sys
for t in json.load(sys.stdin)["data"]["activeTargets"]:
    print("   ", t["labels"].get("job"), t["scrapeUrl"], t["health"], t.get("lastError", ""))' >&2 || true
  kubectl -n monitoring get pods -o wide >&2 || true
  kubectl -n monitoring logs deployment/prometheus --tail=20 >&2 || true
  exit 1
}
# Prometheus's answer to PromQL $1, as "<labels> <value>" lines.
query() {
  curl -sf --get "$PROM/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["status"] == "success", r
for s in r["data"]["result"]:
    print(json.dumps(s["metric"], sort_keys=True), s["value"][1])'
}

[[ -n "$MON_LISTEN" ]] || fail "hack/up.sh --monitoring wrote no $MON_DIR/address"
log "Prometheus is a Running and Ready pod on the host network, at $MON_LISTEN"
fields='{range .items[*]}{.status.phase} {.status.conditions[?(@.type=="Ready")].status} {.spec.hostNetwork} {.status.podIP}{"\n"}{end}'
pod="$(kubectl -n monitoring get pods -l app.kubernetes.io/name=prometheus -o jsonpath="$fields")"
[[ "$pod" == "Running True true ${MON_LISTEN%:*}" ]] ||
  fail "want one pod, Running, Ready, on the host network at ${MON_LISTEN%:*}: $pod"
# It listens on the pod's IP only, never on every address.
listening="$(ss -Hltn "sport = :${MON_LISTEN##*:}" | awk '{print $4}' | sort -u)"
[[ "$listening" == "$MON_LISTEN" ]] || fail "Prometheus listens on $listening, want $MON_LISTEN only"
kubectl -n monitoring get deployment prometheus -o jsonpath='{.status.readyReplicas}' | grep -qx 1 ||
  fail "Deployment monitoring/prometheus has no ready replica"
# The endpoints controller's slice: the pod, by targetRef, which the service proxy requires.
fields='{range .items[*].endpoints[*]}{.addresses[0]} {.targetRef.kind} {.conditions.ready}{"\n"}{end}'
slice="$(kubectl -n monitoring get endpointslices -l kubernetes.io/service-name=prometheus -o jsonpath="$fields")"
[[ "$slice" == "${MON_LISTEN%:*} Pod true" ]] || fail "the Service's endpoints: $slice"

log "the API server's service proxy reaches Prometheus (as the dashboard does)"
proxied() {
  kubectl get --raw "/api/v1/namespaces/monitoring/services/http:prometheus:$MON_PORT/proxy/api/v1/query?query=up" |
    python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["status"] == "success" and r["data"]["result"], r
print(len(r["data"]["result"]))'
}
wait_for 60 proxied || fail "services/proxy: $(proxied 2>&1 | tail -n 3)"
log "    $(proxied) series of up through /api/v1/namespaces/monitoring/services/http:prometheus:$MON_PORT/proxy"

log "promtool on the configuration and rules hack/up.sh wrote, and Prometheus loaded them"
# The credentials and CA the configuration names are the pod's: syntax only, here.
promtool check config --syntax-only "$MON_DIR/prometheus.yml" >/dev/null || fail "promtool check config"
promtool check rules "$MON_DIR/rules.yml" >/dev/null || fail "promtool check rules"
(cd "$REPO_ROOT/hack/monitoring" && promtool test rules rules_test.yml >/dev/null) ||
  fail "promtool test rules hack/monitoring/rules_test.yml"
loaded() { [[ "$(query prometheus_config_last_reload_successful)" == *" 1" ]]; }
wait_for 60 loaded ||
  fail "Prometheus did not load its configuration: $(query prometheus_config_last_reload_successful)"

kubectl create namespace "$NS" >/dev/null
# A pod that burns a little CPU, and one that serves metrics and asks to be scraped.
kubectl -n "$NS" apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: busy}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: busybox:1.36, imagePullPolicy: Never,
     command: [sh, -c, "while :; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 1; done"]}
---
apiVersion: v1
kind: Pod
metadata:
  name: exporter
  annotations: {prometheus.io/scrape: "true", prometheus.io/port: "8000", prometheus.io/path: /metrics}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: busybox:1.36, imagePullPolicy: Never,
     command: [sh, -c, "mkdir -p /www && printf 'e2e_exporter_requests_total 7\n' >/www/metrics && exec httpd -f -p 8000 -h /www"]}
EOF
kubectl -n "$NS" wait pod --all --for=condition=Ready --timeout=60s >/dev/null || fail "the pods did not start"

log "every discovered target is up"
want_jobs="prometheus kubernetes-apiservers kubernetes-nodes kubernetes-nodes-cadvisor node-exporter kubernetes-pods knative-lite-gateway kube-scheduler kube-controller-manager kube-proxy coredns"
targets_up() {
  curl -sf "$PROM/api/v1/targets" | python3 -c '
import json, sys
want = set(sys.argv[1].split())
targets = json.load(sys.stdin)["data"]["activeTargets"]
jobs = {t["labels"]["job"] for t in targets}
down = [t["scrapeUrl"] for t in targets if t["health"] != "up"]
sys.exit(0 if want <= jobs and not down else 1)' "$want_jobs"
}
wait_for 120 targets_up || fail "not every target is up (want jobs: $want_jobs)"
curl -sf "$PROM/api/v1/targets" | python3 -c '
import json, sys
for t in json.load(sys.stdin)["data"]["activeTargets"]:
    print("    %-28s %-6s %s" % (t["labels"]["job"], t["health"], t["scrapeUrl"]))' >&2
[[ -z "$(query 'up == 0')" ]] || fail "up == 0: $(query 'up == 0')"

log "PromQL: a pod's CPU from cAdvisor, and a pod's own metric"
cpu_has_data() { [[ -n "$(query "container_cpu_usage_seconds_total{namespace=\"$NS\",pod=\"busy\"}")" ]]; }
wait_for 60 cpu_has_data || fail "no container_cpu_usage_seconds_total for pod $NS/busy"
query "container_cpu_usage_seconds_total{namespace=\"$NS\",pod=\"busy\"}" >&2
wait_for 60 sh -c "curl -sf --get '$PROM/api/v1/query' --data-urlencode 'query=e2e_exporter_requests_total{namespace=\"$NS\",pod=\"exporter\"} == 7' | grep -q '\"value\"'" ||
  fail "the annotated pod's metric was not scraped"

log "rules are loaded"
rules="$(curl -sf "$PROM/api/v1/rules" | python3 -c '
import json, sys
for g in json.load(sys.stdin)["data"]["groups"]:
    for r in g["rules"]:
        print(r["type"], r["name"], r["health"])')"
for alert in KubeNodeNotReady KubePodCrashLooping KubeAPIErrorsHigh; do
  grep -q "^alerting $alert ok$" <<<"$rules" || fail "alert $alert is not loaded: $rules"
done
grep -q "^recording cluster:apiserver_request_errors:ratio_rate5m ok$" <<<"$rules" ||
  fail "the API error ratio is not recorded: $rules"

log "kubectl top pod (the metrics API) still works"
wait_for 60 sh -c "kubectl -n $NS top pod busy --no-headers | grep -q '^busy '" ||
  fail "kubectl top pod: $(kubectl -n "$NS" top pod busy 2>&1)"

kubectl -n monitoring get service prometheus >/dev/null || fail "no Service monitoring/prometheus"

log "hack/down.sh stops Prometheus and the discovery"
"$REPO_ROOT/hack/down.sh" >/dev/null
! curl -s -o /dev/null "$PROM/-/ready" || fail "Prometheus still answers after hack/down.sh"
! curl -s -o /dev/null "http://$MON_SD_LISTEN/sd/node" || fail "the discovery still answers after hack/down.sh"
log "monitoring: Prometheus a Ready pod behind the service proxy, every target up, pod CPU in PromQL, rules loaded"
