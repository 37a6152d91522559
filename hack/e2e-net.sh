#!/usr/bin/env bash
# Cross-node networking end to end, with stock kubectl against a fresh 3-node cluster from
# hack/up.sh --nodes 3 (the host and two worker namespaces; see hack/multinode.sh):
#   - pod to pod across nodes (host-gw routes of the route agents, or the VXLAN overlay:
#     its devices, the Nodes' Flannel leases and the pods' MTU are checked too);
#   - a ClusterIP Service over 3 pods on 2 nodes, from a pod on the third: >= 2 backends answer;
#   - a NodePort, from inside one worker's namespace to the other worker's address;
#   - deleting a Service removes its rules on the nodes;
#   - cluster DNS (on the host, 172.30.0.1:53) answers pods on a worker through 10.96.0.10;
#   - endpoints follow readiness: an unready pod leaves the Service's rules and comes back;
#   - an Ingress (two hosts, two paths, two Services) is served on every node's port 80 and
#     its status lists all node addresses;
#   - NetworkPolicies: one isolating a pod (across nodes and on its own node), one admitting a
#     labelled client, one limiting a pod's egress; all traffic flows again once they go;
#   - restarting a worker's `minik8s node` (its proxier) keeps the rules and an established
#     connection through a ClusterIP.
# MINIK8S_PROXY_MODE=nftables runs every node's proxier in nftables mode (default iptables).
# MINIK8S_POD_NETWORK=vxlan runs it on hack/up.sh's routed network (no shared L2) with the
# VXLAN backend; the default is host-gw on one bridge.
# Uses its own data dir and port; everything it starts is removed on exit (hack/down.sh --purge).
# Its pod range is the single-node cluster's too: run it while no other cluster runs here.
source "$(dirname "$0")/lib.sh"
source "$REPO_ROOT/hack/multinode.sh"

export MINIK8S_DATA_DIR="$(mktemp -d /tmp/minik8s-net.XXXXXX)"
export MINIK8S_PORT="${MINIK8S_NET_PORT:-16453}"
export MINIK8S_MERGE_KUBECONFIG="$MINIK8S_DATA_DIR/kubeconfig"
export MINIK8S_IMAGES="pause busybox"
# Cluster DNS relays no name off the machine: only cluster names are asked here.
export MINIK8S_DNS_RESOLV_CONF=/dev/null
DATA_DIR="$MINIK8S_DATA_DIR"
# MINIK8S_KEEP=1 leaves the cluster running for a look after a failure.
if [[ -z "${MINIK8S_KEEP:-}" ]]; then
  trap '"$REPO_ROOT/hack/down.sh" --purge >/dev/null 2>&1 || true' EXIT
fi
"$REPO_ROOT/hack/up.sh" --nodes 3 --pod-network "$MN_POD_NETWORK"
export KUBECONFIG="$DATA_DIR/admin.kubeconfig"
NS=e2e-net
PROXY_MODE="${MINIK8S_PROXY_MODE:-iptables}"
# A node's Service rules as text: the nat table, or the proxier's nftables table. (Callers grep
# all of it: grep -q stops at the match, SIGPIPEs the writer and fails under pipefail.)
nat_rules() {
  if [[ "$PROXY_MODE" == nftables ]]; then
    nsenter --net="/run/netns/$1" nft list table ip kube-proxy 2>/dev/null || true
  else
    nsenter --net="/run/netns/$1" iptables-save -t nat
  fi
}
# How a rule DNATing to address:port reads in that text.
dnat_text() {
  if [[ "$PROXY_MODE" == nftables ]]; then echo "dnat to $1"; else echo "--to-destination $1"; fi
}
log "proxy mode: $PROXY_MODE, pod network: $MN_POD_NETWORK"
W1=mk8s-node1 W1_IP="$(mn_ip 1)" W2=mk8s-node2 W2_IP="$(mn_ip 2)"
BIN="${MINIK8S_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/minik8s}"
HOST="$(kubectl get nodes -o name | sed 's|node/||' | grep -v '^mk8s-node' | head -1)"
kubectl create namespace "$NS" >/dev/null

# The workers joined with a bootstrap token (kubelet TLS bootstrap): each asked for its client
# certificate as system:bootstrap:<id>, approved by the controller-manager, then as itself for
# the serving certificate the API server checks when it calls the kubelet (logs, exec); neither
# holds the CA key.
# "signer requester condition" of each CSR with a certificate.
issued_csrs() {
  kubectl get csr -o jsonpath='{range .items[*]}{.spec.signerName} {.spec.username} {.status.conditions[0].type} {.status.certificate}{"\n"}{end}' |
    awk 'NF == 4 {print $1, $2, $3}'
}
# issued_count SIGNER REQUESTER-REGEX MIN
issued_count() { (($(issued_csrs | grep -cE "^$1 $2 Approved$") >= $3)); }
issued_count kubernetes.io/kube-apiserver-client-kubelet 'system:bootstrap:[a-z0-9]{6}' 2 ||
  { log "FAIL: the workers' client certificates were not issued to a bootstrap token"; issued_csrs >&2; exit 1; }
for k in 1 2; do
  w="$(mn_ns "$k")"
  [[ ! -e "$(mn_dir "$k")/pki/ca.key" ]] || { log "FAIL: $w holds the CA key"; exit 1; }
  wait_for 60 issued_count kubernetes.io/kubelet-serving "system:node:$w" 1 ||
    { log "FAIL: $w's serving certificate was not issued"; issued_csrs >&2; exit 1; }
done
log "both workers joined with a bootstrap token and hold certificates issued through CSRs"

fail() {
  log "FAIL: $*"
  kubectl -n "$NS" get pods,svc,endpointslices -o wide >&2 || true
  exit 1
}

pod() { # name node [app label] [readiness probe]
  kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: ${3:-none}, pod: $1}}
spec:
  nodeSelector: {kubernetes.io/hostname: $2}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.36
    imagePullPolicy: Never
    command: [sh, -c, 'mkdir -p /www/x && hostname | tee /www/x/index.html > /www/index.html && touch /tmp/ready && exec httpd -f -p 80 -h /www']
    readinessProbe: ${4:-"{httpGet: {path: /, port: 80}, periodSeconds: 1}"}
YAML
}

# Three web pods on two nodes (the host and worker 1); the client on worker 2.
pod web-0 "$HOST" web
pod web-1 "$W1" web
# web-2 is Ready while /tmp/ready exists (the readiness case removes it).
pod web-2 "$W1" web "{exec: {command: [test, -f, /tmp/ready]}, periodSeconds: 1}"
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
if [[ "$MN_POD_NETWORK" != host-gw ]]; then
  log "the VXLAN overlay: Flannel leases on every Node, devices, routes, pod MTU"
  for n in $(kubectl get nodes -o name); do
    lease="$(kubectl get "$n" -o jsonpath='{.metadata.annotations.flannel\.alpha\.coreos\.com/backend-type} {.metadata.annotations.flannel\.alpha\.coreos\.com/backend-data}')"
    [[ "$lease" =~ ^vxlan\ \{\"VNI\":1,\"VtepMAC\":\"([0-9a-f]{2}:){5}[0-9a-f]{2}\"\}$ ]] || fail "$n carries no vxlan lease: $lease"
  done
  dev="$(nsenter --net="/run/netns/$W2" ip -d link show flannel.1)"
  [[ "$dev" == *"mtu 1450 "* && "$dev" == *"vxlan id 1 local $W2_IP "* && "$dev" == *"dstport 8472 "* && "$dev" == *nolearning* ]] ||
    fail "$W2's flannel.1 is not as Flannel makes it: $dev"
  routes="$(nsenter --net="/run/netns/$W2" ip route show proto "$MN_ROUTE_PROTOCOL")"
  (($(grep -c 'dev flannel.1 .*onlink' <<<"$routes") == 2)) || fail "$W2 lacks the 2 overlay routes: $routes"
  mtu="$(kubectl -n "$NS" exec client -- cat /sys/class/net/eth0/mtu)"
  [[ "$mtu" == 1450 ]] || fail "the client pod's MTU is $mtu, not 1450"
  # A packet of the pods' full MTU (1422 data + 28 header bytes) crosses the overlay.
  kubectl -n "$NS" exec web-0 -- ping -c 1 -W 3 -s 1422 "$client_ip" >/dev/null || fail "a 1450-byte ping from web-0 to the client fails"
fi

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
rules() { nat_rules "$1" | grep -c "$NS/web-np" || true; }
no_rules() { (($(rules "$1") == 0)); }
(($(rules "$W1") > 0)) || fail "no rules for $NS/web-np on $W1"
kubectl -n "$NS" delete svc web-np >/dev/null
wait_for 30 no_rules "$W1" || fail "rules of $NS/web-np remain on $W1"
wait_for 30 no_rules "$W2" || fail "rules of $NS/web-np remain on $W2"
if nsenter --net=/run/netns/$W2 curl -sf -m 2 "http://$W1_IP:$node_port/" >/dev/null; then
  fail "NodePort $node_port still answers after the Service was deleted"
fi


log "cluster DNS from a pod on $W2"
# The client's resolv.conf names 10.96.0.10 (the host's DNS, DNATed by $W2's proxier).
resolves() { # name address
  local out
  out="$(kubectl -n "$NS" exec client -- nslookup "$1" 2>&1 || true)"
  grep -Eq "^Address:[[:space:]]+$2\$" <<<"$out"
}
kube_ip="$(kubectl -n default get svc kubernetes -o jsonpath='{.spec.clusterIP}')"
wait_for 30 resolves kubernetes.default.svc.cluster.local "$kube_ip" ||
  fail "kubernetes.default does not resolve to $kube_ip from $W2: $(kubectl -n "$NS" exec client -- nslookup kubernetes.default.svc.cluster.local 2>&1)"
wait_for 30 resolves "web.$NS.svc.cluster.local" "$cluster_ip" ||
  fail "web does not resolve to $cluster_ip from $W2: $(kubectl -n "$NS" exec client -- nslookup "web.$NS.svc.cluster.local" 2>&1)"
# busybox nslookup asks for the name as given; its wget walks the search list.
for name in web "web.$NS"; do
  out="$(get "http://$name/")" || fail "http://$name/ does not answer from $W2"
  [[ "$out" == web-* ]] || fail "http://$name/ answered $out"
done

log "endpoints follow readiness"
web2_ip="$(kubectl -n "$NS" get pod web-2 -o jsonpath='{.status.podIP}')"
slice_ready() { # address true|false
  [[ "$(kubectl -n "$NS" get endpointslices -l kubernetes.io/service-name=web \
    -o jsonpath="{.items[*].endpoints[?(@.addresses[0]==\"$1\")].conditions.ready}")" == "$2" ]]
}
dnat_rules() { # node address: rules that DNAT to the address
  nat_rules "$1" | grep -c -- "$(dnat_text "$2:80")" || true
}
no_dnat() { (($(dnat_rules "$1" "$2") == 0)); }
has_dnat() { (($(dnat_rules "$1" "$2") > 0)); }
has_dnat "$W2" "$web2_ip" || fail "no rule on $W2 sends to web-2 ($web2_ip)"
kubectl -n "$NS" exec web-2 -- rm /tmp/ready
kubectl -n "$NS" wait --for=condition=Ready=false pod/web-2 --timeout=30s >/dev/null || fail "web-2 stays Ready"
wait_for 30 slice_ready "$web2_ip" false || fail "the EndpointSlice does not mark web-2 not ready"
wait_for 30 no_dnat "$W2" "$web2_ip" || fail "$W2 still sends to the unready web-2"
for _ in $(seq 1 12); do
  out="$(get "http://$cluster_ip/")" || fail "$cluster_ip does not answer while web-2 is unready"
  [[ "$out" != web-2 ]] || fail "the unready web-2 answered on $cluster_ip"
done
kubectl -n "$NS" exec web-2 -- touch /tmp/ready
kubectl -n "$NS" wait --for=condition=Ready pod/web-2 --timeout=30s >/dev/null || fail "web-2 not Ready again"
wait_for 30 slice_ready "$web2_ip" true || fail "the EndpointSlice does not mark web-2 ready again"
wait_for 30 has_dnat "$W2" "$web2_ip" || fail "$W2 does not send to web-2 again"

log "an Ingress with two hosts and two paths on every node's port 80"
kubectl -n "$NS" expose pod web-0 --name alt --port 80 --selector pod=web-0 >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  rules:
  - host: a.e2e.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /x, pathType: Prefix, backend: {service: {name: alt, port: {number: 80}}}}
  - host: b.e2e.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: alt, port: {number: 80}}}}
YAML
ing_is() { # from-node address host path pattern
  local out
  out="$(nsenter --net="/run/netns/$1" curl -s -m 3 -H "Host: $3" "http://$2$4" 2>/dev/null)" || return 1
  # shellcheck disable=SC2053
  [[ "$out" == $5 ]]
}
ing_code() { # from-node address host path code
  [[ "$(nsenter --net="/run/netns/$1" curl -s -m 3 -o /dev/null -w '%{http_code}' -H "Host: $3" "http://$2$4" 2>/dev/null)" == "$5" ]]
}
# From worker 2 through worker 1's address.
wait_for 30 ing_is "$W2" "$W1_IP" a.e2e.example /x/ web-0 || fail "a.e2e.example/x/ through $W1 ($W1_IP) does not reach alt"
ing_is "$W2" "$W1_IP" a.e2e.example / "web-*" || fail "a.e2e.example/ through $W1 does not reach web"
ing_is "$W2" "$W1_IP" b.e2e.example / web-0 || fail "b.e2e.example/ through $W1 does not reach alt"
ing_is "$W2" "$W1_IP" b.e2e.example /x/ web-0 || fail "b.e2e.example/x/ through $W1 does not reach alt"
ing_code "$W2" "$W1_IP" c.e2e.example / 404 || fail "an unknown host through $W1 is not 404"
# Every node serves it.
for addr in "$MN_NET.1" "$W2_IP"; do
  wait_for 30 ing_is "$W1" "$addr" a.e2e.example /x/ web-0 || fail "a.e2e.example/x/ through $addr does not reach alt"
done
want_lb="$MN_NET.1 $W1_IP $W2_IP"
lb_is() { [[ "$(kubectl -n "$NS" get ingress web -o jsonpath='{.status.loadBalancer.ingress[*].ip}')" == "$1" ]]; }
wait_for 30 lb_is "$want_lb" ||
  fail "the Ingress status lists $(kubectl -n "$NS" get ingress web -o jsonpath='{.status.loadBalancer.ingress[*].ip}'), not $want_lb"
ing_rv="$(kubectl -n "$NS" get ingress web -o jsonpath='{.metadata.resourceVersion}')"
kubectl -n "$NS" get ingress web >&2

log "NetworkPolicy: isolating a pod, admitting a labelled client, limiting egress"
# A node's policy rules as text: the filter table's MK8S chains, or the nftables table.
policy_rules() {
  if [[ "$PROXY_MODE" == nftables ]]; then
    nsenter --net="/run/netns/$1" nft list table ip minik8s-netpol 2>/dev/null || true
  else
    nsenter --net="/run/netns/$1" iptables-save -t filter | grep -- MK8S || true
  fi
}
web1_ip="$(kubectl -n "$NS" get pod web-1 -o jsonpath='{.status.podIP}')"
web0_ip="$(kubectl -n "$NS" get pod web-0 -o jsonpath='{.status.podIP}')"
# from-pod address: answered, or not within 2 s.
reach() { kubectl -n "$NS" exec "$1" -- timeout 2 wget -qO- "http://$2/" >/dev/null 2>&1; }
blocked() { ! reach "$1" "$2"; }
policy() { # name pod-label spec-yaml (the rest of spec)
  kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: $1}
spec:
  podSelector: {matchLabels: {pod: $2}}
$3
YAML
}
policy isolate-web-1 web-1 "  policyTypes: [Ingress]"
wait_for 30 blocked client "$web1_ip" || fail "web-1 still admits the client ($W2) after isolate-web-1"
blocked web-2 "$web1_ip" || fail "web-1 still admits web-2 on its own node ($W1) after isolate-web-1"
reach client "$web0_ip" || fail "the client no longer reaches the unisolated web-0"
grep -q "$NS/web-1" <<<"$(policy_rules "$W1")" || fail "no policy rules for web-1 on $W1: $(policy_rules "$W1")"
# kubelet probes come from the node itself: web-1 stays Ready while isolated.
kubectl -n "$NS" wait --for=condition=Ready pod/web-1 --timeout=10s >/dev/null || fail "isolated web-1 lost its readiness"
kubectl -n "$NS" label pod client role=client >/dev/null
policy admit-clients web-1 "  ingress:
  - from: [{podSelector: {matchLabels: {role: client}}}]
    ports: [{port: 80}]"
wait_for 30 reach client "$web1_ip" || fail "admit-clients does not let the labelled client reach web-1"
blocked web-2 "$web1_ip" || fail "web-2 (unlabelled) reaches web-1 through admit-clients"
policy client-egress client "  policyTypes: [Egress]
  egress:
  - to: [{podSelector: {matchLabels: {pod: web-0}}}]
    ports: [{protocol: TCP, port: 80}]"
wait_for 30 blocked client "$web1_ip" || fail "client-egress does not keep the client from web-1"
reach client "$web0_ip" || fail "client-egress does not let the client reach web-0"
grep -q "$NS/client" <<<"$(policy_rules "$W2")" || fail "no policy rules for the client on $W2"
kubectl -n "$NS" delete networkpolicy --all >/dev/null
wait_for 30 reach web-2 "$web1_ip" || fail "web-2 does not reach web-1 after the policies went"
wait_for 30 reach client "$web1_ip" || fail "the client does not reach web-1 after the policies went"
no_policy_rules() { ! grep -q "$NS/" <<<"$(policy_rules "$1")"; }
wait_for 30 no_policy_rules "$W1" || fail "policy rules remain on $W1: $(policy_rules "$W1")"

log "restarting $W2's node process keeps an established connection through a ClusterIP"
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: echo, labels: {app: echo}}
spec:
  nodeSelector: {kubernetes.io/hostname: $W1}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.36
    imagePullPolicy: Never
    command: [nc, -ll, -p, "9000", -e, cat]
    readinessProbe: {tcpSocket: {port: 9000}, periodSeconds: 1}
YAML
kubectl -n "$NS" wait --for=condition=Ready pod/echo --timeout=60s >/dev/null || fail "echo not Ready"
kubectl -n "$NS" expose pod echo --port 9000 >/dev/null
echo_ip="$(kubectl -n "$NS" get svc echo -o jsonpath='{.spec.clusterIP}')"
svc_rules() { nat_rules "$1" | grep -c -- "$2" || true; }
has_svc_rules() { (($(svc_rules "$1" "$2") > 0)); }
echo_pod_ip="$(kubectl -n "$NS" get pod echo -o jsonpath='{.status.podIP}')"
has_echo_dnat() { nat_rules "$W2" | grep -- "$(dnat_text "$echo_pod_ip:9000")" >/dev/null; }
wait_for 30 has_echo_dnat || fail "$W2 has no rule for $NS/echo"
# One connection for the pod's whole life (restartPolicy Never: if it breaks, nc exits and the
# pod ends): lines appended to /tmp/in go out, the echo comes back into /tmp/out.
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: stream}
spec:
  nodeSelector: {kubernetes.io/hostname: $W2}
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.36
    imagePullPolicy: Never
    command: [sh, -c, 'touch /tmp/in && tail -f /tmp/in | nc $echo_ip 9000 > /tmp/out']
YAML
kubectl -n "$NS" wait --for=condition=Ready pod/stream --timeout=60s >/dev/null || fail "stream not Ready"
send() { kubectl -n "$NS" exec stream -- sh -c "echo $1 >> /tmp/in"; }
echoed() { kubectl -n "$NS" exec stream -- grep -qx "$1" /tmp/out; }
send ping-1
wait_for 30 echoed ping-1 || fail "ping-1 did not come back through $echo_ip"
# While the node process is down no kubelet execs: the pod's files are reached through the
# root of its tail process on this machine.
tail_pid="$(pgrep -fx 'tail -f /tmp/in' || true)"
[[ "$tail_pid" =~ ^[0-9]+$ ]] || fail "no single tail process of the stream pod: $tail_pid"
pidfile="$(mn_dir 2)/node.pid"
old_pid="$(cat "$pidfile")"
stop_pidfile "$pidfile"
! kill -0 "$old_pid" 2>/dev/null || fail "$W2's node process $old_pid did not stop"
log "stopped $W2's node process $old_pid"
has_echo_dnat || fail "$W2's rules for $NS/echo went with its node process"
echo ping-2 >>"/proc/$tail_pid/root/tmp/in"
wait_for 30 grep -qx ping-2 "/proc/$tail_pid/root/tmp/out" ||
  fail "ping-2 did not come back while $W2's node process was stopped"
# No token: the node restarts on the certificates it was issued when it joined.
mn_start_nodes 3 "$BIN" "$MINIK8S_PORT" ""
kubectl wait --for=condition=Ready "node/$W2" --timeout=60s >/dev/null || fail "$W2 not Ready after its restart"
# The new proxier has synced (a full sync) once it has the rules of a new Service.
kubectl -n "$NS" expose pod web-0 --name after-restart --port 80 --selector pod=web-0 >/dev/null
wait_for 60 has_svc_rules "$W2" "$NS/after-restart" || fail "the restarted proxier on $W2 does not sync"
send ping-3
wait_for 30 echoed ping-3 || fail "ping-3 did not come back after $W2's proxier restarted"
state="$(kubectl -n "$NS" get pod stream -o jsonpath='{.status.phase} {.status.containerStatuses[0].restartCount}')"
[[ "$state" == "Running 0" ]] || fail "the stream pod is $state, not Running 0: its connection broke"
wait_for 30 ing_is "$W1" "$W2_IP" a.e2e.example /x/ web-0 || fail "the restarted $W2 does not serve the Ingress"
# No proxy rewrote the status since it converged: the nodes agree on it.
[[ "$(kubectl -n "$NS" get ingress web -o jsonpath='{.metadata.resourceVersion}')" == "$ing_rv" ]] ||
  fail "the Ingress changed after its status converged: $(kubectl -n "$NS" get ingress web -o jsonpath='{.status}')"

log "cross-node networking: all checks passed"
