# Multi-node local clusters, sourced by hack/up.sh (--nodes N) and hack/down.sh.
# Node 1 is the `minik8s server` on the host. Every other node K (1..N-1) is `minik8s node` in a
# network namespace mk8s-nodeK joined by a veth to the bridge mk8s0, which has no uplink: the
# namespaces have no default route, only the bridge subnet and the pod routes the route agents
# add, so no cluster traffic can leave the machine.
# `--pod-network vxlan` (or auto; $MINIK8S_POD_NETWORK) builds a routed network instead, with no
# shared L2 (so host-gw could not work): a router namespace mk8s-router, the host joined to it
# by the veth mk8s0 (172.30.0.1/24) and each worker K by a veth of its own (172.30.K.2/24,
# router 172.30.K.1); every node routes 172.30.0.0/16 via the router and nothing else, so still
# nothing leaves the machine. Pods then reach other nodes through the VXLAN overlay.
# The workers join the namespace with `nsenter --net`, not `ip netns exec`: the latter remounts
# /sys, which hides /sys/fs/cgroup from runc and the kubelet.

MN_BRIDGE=mk8s0
MN_NET=172.30.0                 # the bridge's /24; the host is .1, worker K is .K+1
MN_HOST_BRIDGE=mk8s-cni0        # the host node's pod bridge (the single-node cluster uses cni0)
MN_HOST_CGROUP=/mk8s-host
MN_ROUTE_PROTOCOL="${MINIK8S_ROUTE_PROTOCOL:-212}"
MN_KUBELET_PORT="${MINIK8S_KUBELET_PORT:-10260}" # the host node's; workers keep 10250
MN_POD_NETWORK="${MINIK8S_POD_NETWORK:-host-gw}" # host-gw | vxlan | auto (--pod-network-mode)
MN_ROUTER=mk8s-router

mn_ns() { echo "mk8s-node$1"; }
mn_dir() { echo "$DATA_DIR/nodes/$1"; }
# Whether the nodes sit on separate subnets behind $MN_ROUTER (every mode but host-gw).
mn_routed() { [[ "$MN_POD_NETWORK" != host-gw ]]; }
mn_ip() { if mn_routed; then echo "172.30.$1.2"; else echo "$MN_NET.$(($1 + 1))"; fi; }

# The server's flags for the host node of a multi-node cluster. Its cluster DNS listens on
# the node address only ($MN_NET.1:53, see mn_check_dns_port); the workers' proxiers DNAT
# the kube-dns Service's address there.
mn_server_args() {
  echo --advertise-address "$MN_NET.1" --node-ip "$MN_NET.1" --bridge "$MN_HOST_BRIDGE" \
    --cgroup-root "$MN_HOST_CGROUP" --route-protocol "$MN_ROUTE_PROTOCOL" \
    --kubelet-port "$MN_KUBELET_PORT" --pod-network-mode "$MN_POD_NETWORK"
}

# Cluster DNS needs port 53 on $MN_NET.1: refuse to start while a socket holds it there or on
# every address.
mn_check_dns_port() {
  local held
  held="$(ss -Hlntu 'sport = :53' 2>/dev/null | awk '{print $5}' |
    grep -E "^(0\.0\.0\.0|\*|\[::\]|${MN_NET//./\\.}\.1):53$" || true)"
  if [[ -n "$held" ]]; then
    log "port 53 is taken on $(echo "$held" | tr '\n' ' ')- cluster DNS needs $MN_NET.1:53: stop its owner first"
    exit 1
  fi
}

# The host node shares the pod range 10.244.0.0/16, its routes and the KUBE-* iptables chains
# with any other minik8s cluster on this machine: refuse to start beside one.
mn_check_alone() {
  if pgrep -f "minik8s server" >/dev/null 2>&1; then
    log "another minik8s server runs on this machine; a multi-node cluster would share its pod range, routes and iptables chains: stop it first"
    exit 1
  fi
}

# The host node's pod bridge takes 10.244.0.1: refuse to start while another device (a
# single-node cluster's cni0, or one a test left) has an address in the pod range.
mn_check_pod_range() {
  local held
  held="$(ip -o -4 addr show to 10.244.0.0/16 | awk -v own="$MN_HOST_BRIDGE" '$2 != own {print $2}' |
    sort -u | tr '\n' ' ')"
  if [[ -n "$held" ]]; then
    log "${held}holds an address in the pod range 10.244.0.0/16, which the host node's $MN_HOST_BRIDGE needs: stop its cluster (hack/down.sh) or delete it"
    exit 1
  fi
}

# The bridge and one namespace per worker; the API server's certificate covers $MN_NET.1
# because the bridge has that address before the server starts.
mn_setup_network() {
  local nodes="$1" k ns
  printf 'MN_NODES=%s\nMN_POD_NETWORK=%s\n' "$nodes" "$MN_POD_NETWORK" >"$DATA_DIR/multinode.env"
  if mn_routed; then
    mn_setup_routed_network "$nodes"
    return
  fi
  if ! ip link show "$MN_BRIDGE" >/dev/null 2>&1; then
    ip link add "$MN_BRIDGE" type bridge
  fi
  ip addr replace "$MN_NET.1/24" dev "$MN_BRIDGE"
  ip link set "$MN_BRIDGE" up
  for ((k = 1; k < nodes; k++)); do
    ns="$(mn_ns "$k")"
    if ! ip netns list | grep -x "$ns\( .*\)\?" >/dev/null; then
      ip netns add "$ns"
    fi
    if ! ip link show "mk8s-v$k" >/dev/null 2>&1; then
      ip link add "mk8s-v$k" type veth peer name eth0 netns "$ns"
    fi
    ip link set "mk8s-v$k" master "$MN_BRIDGE" up
    ip -n "$ns" addr replace "$(mn_ip "$k")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
  done
}

# The routed network: no two nodes share a link, the router namespace forwards between them.
mn_setup_routed_network() {
  local nodes="$1" k ns
  if ! ip netns list | grep -x "$MN_ROUTER\( .*\)\?" >/dev/null; then
    ip netns add "$MN_ROUTER"
  fi
  ip -n "$MN_ROUTER" link set lo up
  ip netns exec "$MN_ROUTER" sysctl -qw net.ipv4.ip_forward=1
  if ! ip link show "$MN_BRIDGE" >/dev/null 2>&1; then
    ip link add "$MN_BRIDGE" type veth peer name r0 netns "$MN_ROUTER"
  fi
  ip addr replace "$MN_NET.1/24" dev "$MN_BRIDGE"
  ip link set "$MN_BRIDGE" up
  ip -n "$MN_ROUTER" addr replace "$MN_NET.254/24" dev r0
  ip -n "$MN_ROUTER" link set r0 up
  ip route replace 172.30.0.0/16 via "$MN_NET.254" dev "$MN_BRIDGE"
  for ((k = 1; k < nodes; k++)); do
    ns="$(mn_ns "$k")"
    if ! ip netns list | grep -x "$ns\( .*\)\?" >/dev/null; then
      ip netns add "$ns"
    fi
    if ! ip -n "$MN_ROUTER" link show "r$k" >/dev/null 2>&1; then
      ip -n "$MN_ROUTER" link add "r$k" type veth peer name eth0 netns "$ns"
    fi
    ip -n "$MN_ROUTER" addr replace "172.30.$k.1/24" dev "r$k"
    ip -n "$MN_ROUTER" link set "r$k" up
    ip -n "$ns" addr replace "$(mn_ip "$k")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route replace 172.30.0.0/16 via "172.30.$k.1" dev eth0
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
  done
}

# Starts `minik8s node` in every worker namespace, each with its own data dir (its images
# hard-linked from the server's), containerd, cgroup root and name mk8s-nodeK.
# Each worker joins as upstream's kubelets do: with bootstrap token $4 and the CA certificate,
# asking for its certificates through CSRs (kubelet TLS bootstrap); it never reads the CA key.
# Without a token a node restarts on the certificates it was issued.
mn_start_nodes() {
  local nodes="$1" bin="$2" port="$3" token="$4" k ns dir
  for ((k = 1; k < nodes; k++)); do
    ns="$(mn_ns "$k")"
    dir="$(mn_dir "$k")"
    mkdir -p "$dir/images"
    for tar in "$DATA_DIR"/images/*.tar; do
      ln -f "$tar" "$dir/images/" 2>/dev/null || cp -f "$tar" "$dir/images/"
    done
    if [[ -f "$dir/node.pid" ]] && kill -0 "$(cat "$dir/node.pid")" 2>/dev/null; then
      continue
    fi
    log "starting node $ns ($(mn_ip "$k"), logs in $dir/node.log)"
    env ${token:+MINIK8S_TOKEN="$token"} nohup nsenter --net="/run/netns/$ns" "$bin" node --data-dir "$dir" \
      --server "https://$MN_NET.1:$port" --certificate-authority "$DATA_DIR/pki/ca.crt" \
      --node-name "$ns" --node-ip "$(mn_ip "$k")" --cgroup-root "/$ns" \
      --route-protocol "$MN_ROUTE_PROTOCOL" --pod-network-mode "$MN_POD_NETWORK" >>"$dir/node.log" 2>&1 &
    echo $! >"$dir/node.pid"
  done
}

# Undoes mn_setup_network and mn_start_nodes: processes, pods, mounts, cgroups, namespaces,
# the bridge and the host's routes of our route protocol.
mn_down() {
  local bin="$1" nodes k ns dir pid
  # shellcheck disable=SC1091
  source "$DATA_DIR/multinode.env"
  nodes="$MN_NODES"
  for ((k = 1; k < nodes; k++)); do
    ns="$(mn_ns "$k")"
    dir="$(mn_dir "$k")"
    stop_pidfile "$dir/node.pid"
    if [[ -e "/run/netns/$ns" ]]; then
      if [[ -x "$bin" && -d "$dir/containerd" ]]; then
        nsenter --net="/run/netns/$ns" "$bin" teardown --data-dir "$dir" --bridge cni0 \
          --cgroup-root "/$ns" >>"$dir/node.log" 2>&1 || log "teardown of $ns reported errors (see $dir/node.log)"
      fi
      # Whatever still runs in the namespace was started for this node.
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    fi
    # Mounts left under the node's data dir, deepest first.
    awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r |
      while read -r m; do umount -l "$m" 2>/dev/null || true; done
    ip link del "mk8s-v$k" 2>/dev/null || true
  done
  ip route flush proto "$MN_ROUTE_PROTOCOL" 2>/dev/null || true
  ip link del "$MN_BRIDGE" 2>/dev/null || true
  if [[ "${MN_POD_NETWORK:-host-gw}" != host-gw ]]; then
    # The host node's vxlan device (its neighbour and FDB entries go with it), the router.
    ip link del flannel.1 2>/dev/null || true
    ip netns del "$MN_ROUTER" 2>/dev/null || true
  fi
  rm -f "$DATA_DIR/multinode.env"
  log "removed $((nodes - 1)) worker node(s), $MN_BRIDGE and their routes"
}

# The host proxier's KUBE-* chains. Any other cluster's proxier on this machine uses the same
# names, so they are removed only while no other `minik8s server` runs. Run after the server
# stopped.
mn_cleanup_host_iptables() {
  local bin="$1"
  if pgrep -f "minik8s server" >/dev/null 2>&1; then
    log "another minik8s server runs here: the host's KUBE-* iptables chains stay"
  elif [[ -x "$bin" ]]; then
    "$bin" proxy --cleanup >/dev/null 2>&1 || log "removing the host's KUBE-* iptables chains failed"
  fi
}

# The pod cgroups of the host node and the workers in every hierarchy, cgroup v2's `unified`
# one of a hybrid machine included (runc creates them there too). Run after the teardowns.
mn_remove_cgroups() {
  local dir
  for dir in /sys/fs/cgroup/*"$MN_HOST_CGROUP" /sys/fs/cgroup/*/mk8s-node[0-9]*; do
    [[ -d "$dir" ]] && find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}
