#!/usr/bin/env bash
# Cross-node networking end to end, with stock kubectl against a fresh 3-node cluster from
# hack/up.sh --nodes 3 (the host and two worker namespaces; see hack/multinode.sh):
#   - pod to pod across nodes (host-gw routes of the route agents);
#   - a ClusterIP Service over 3 pods on 2 nodes, from a pod on the third: >= 2 backends answer;
#   - a NodePort, from inside one worker's namespace to the other worker's address;
#   - deleting a Service removes its iptables rules on the nodes.
# Uses its own data dir and port; everything it starts is removed on exit (hack/down.sh --purge).
# Its pod range is the single-node cluster's too: run it while no other cluster runs here.
source "$(dirname "$0")/lib.sh"

export MINIK8S_DATA_DIR="$(mktemp -d /tmp/minik8s-net.XXXXXX)"
export MINIK8S_PORT="${MINIK8S_NET_PORT:-16453}"
export MINIK8S_MERGE_KUBECONFIG="$MINIK8S_DATA_DIR/kubeconfig"
export MINIK8S_IMAGES="pause busybox"
DATA_DIR="$MINIK8S_DATA_DIR"
# MINIK8S_KEEP=1 leaves the cluster running for a look after a failure.
if [[ -z "${MINIK8S_KEEP:-}" ]]; then
  trap '"$REPO_ROOT/hack/down.sh" --purge >/dev/null 2>&1 || true' EXIT
fi
"$REPO_ROOT/hack/up.sh" --nodes 3
export KUBECONFIG="$DATA_DIR/admin.kubeconfig"
NS=e2e-net
W1=mk8s-node1 W1_IP=172.30.0.2 W2=mk8s-node2
HOST="$(kubectl get nodes -o name | sed 's|node/||' | grep -v '^mk8s-node' | head -1)"
kubectl create namespace "$NS" >/dev/null

fail() {
  log "FAIL: $*"
  kubectl -n "$NS" get pods,svc,endpointslices -o wide >&2 || true
  exit 1
}

pod() { # name node [labels]
  kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: ${3:-none}}}
spec:
  nodeSelector: {kubernetes.io/hostname: $2}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.36
    imagePullPolicy: Never
    command: [sh, -c, 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 80 -h /www']
    readinessProbe: {httpGet: {path: /, port: 80}, periodSeconds: 1}
YAML
}

# Three web pods on two nodes (the host and worker 1); the client on worker 2.
pod web-0 "$HOST" web
pod web-1 "$W1" web
pod web-2 "$W1" web
pod client "$W2"
kubectl -n "$NS" wait --for=condition=Ready pod --all --timeout=120s >/dev/null || fail "pods not Ready"
for p in web-0 web-1 web-2 client; do
  log "$p on $(kubectl -n "$NS" get pod "$p" -o jsonpath='{.spec.nodeName} {.status.podIP}')"
done

# (wget -T crashes in Debian's static busybox: bound it with timeout instead.)
get() { kubectl -n "$NS" exec client -- timeout 5 wget -qO- "$1"; }

log "pod to pod across nodes"
for p in web-0 web-1; do
  ip="$(kubectl -n "$NS" get pod "$p" -o jsonpath='{.status.podIP}')"
  out="$(get "http://$ip/")" || fail "client ($W2) cannot reach $p at $ip"
  [[ "$out" == "$p" ]] || fail "$p at $ip answered $out"
done
# And back: the host's pod reaches worker 2's.
client_ip="$(kubectl -n "$NS" get pod client -o jsonpath='{.status.podIP}')"
kubectl -n "$NS" exec web-0 -- ping -c 1 -W 3 "$client_ip" >/dev/null || fail "web-0 cannot ping client at $client_ip"

log "ClusterIP Service over 3 pods on 2 nodes"
kubectl -n "$NS" expose pod web-0 --name web --port 80 --selector app=web >/dev/null
wait_for 30 sh -c "test \$(kubectl -n $NS get endpointslices -l kubernetes.io/service-name=web -o jsonpath='{.items[*].endpoints[*].addresses[0]}' | wc -w) -eq 3" ||
  fail "the web Service does not have 3 endpoints"
cluster_ip="$(kubectl -n "$NS" get svc web -o jsonpath='{.spec.clusterIP}')"
declare -A seen=()
for _ in $(seq 1 20); do
  if out="$(get "http://$cluster_ip/")"; then seen["$out"]=1; fi
done
log "backends answering on $cluster_ip: ${!seen[*]}"
((${#seen[@]} >= 2)) || fail "fewer than 2 distinct backends answered on $cluster_ip"

log "NodePort from one worker's namespace to the other's address"
kubectl -n "$NS" create service nodeport web-np --tcp 80:80 >/dev/null
kubectl -n "$NS" patch svc web-np -p '{"spec":{"selector":{"app":"web"}}}' >/dev/null
node_port="$(kubectl -n "$NS" get svc web-np -o jsonpath='{.spec.ports[0].nodePort}')"
wait_for 30 nsenter --net=/run/netns/$W2 curl -sf -m 3 "http://$W1_IP:$node_port/" ||
  fail "NodePort $node_port on $W1 ($W1_IP) does not answer from $W2"
out="$(nsenter --net=/run/netns/$W2 curl -sf -m 3 "http://$W1_IP:$node_port/")"
[[ "$out" == web-* ]] || fail "NodePort answered $out"

log "deleting a Service removes its rules"
rules() { nsenter --net="/run/netns/$1" iptables-save -t nat | grep -c "$NS/web-np" || true; }
(($(rules "$W1") > 0)) || fail "no rules for $NS/web-np on $W1"
kubectl -n "$NS" delete svc web-np >/dev/null
wait_for 30 sh -c "test \$(nsenter --net=/run/netns/$W1 iptables-save -t nat | grep -c '$NS/web-np') -eq 0" ||
  fail "rules of $NS/web-np remain on $W1"
wait_for 30 sh -c "test \$(nsenter --net=/run/netns/$W2 iptables-save -t nat | grep -c '$NS/web-np') -eq 0" ||
  fail "rules of $NS/web-np remain on $W2"
if nsenter --net=/run/netns/$W2 curl -sf -m 2 "http://$W1_IP:$node_port/" >/dev/null; then
  fail "NodePort $node_port still answers after the Service was deleted"
fi

log "cross-node networking: all checks passed"
