#!/usr/bin/env bash
# Storage across nodes, with stock kubectl against a fresh 3-node cluster from
# hack/up.sh --nodes 3 (the host and two worker namespaces; see hack/multinode.sh):
#   - WaitForFirstConsumer: a claim of the default class (local-path) used by a pod pinned to
#     each node is provisioned on that pod's node: the PV's node affinity names it and the
#     directory lies in that node's data dir, holding what the pod wrote;
#   - a second pod of the claim, with no node chosen, is scheduled by the PV's node affinity to
#     the same node and reads the data back;
#   - deleting the claim (reclaim Delete) removes the volume and its directory;
#   - kill -9 of the server in the middle of a StatefulSet rollout: once it is back, the
#     rollout ends with exactly the StatefulSet's pods, every one at the update revision,
#     currentRevision = updateRevision, and two ControllerRevisions (the old and the new).
# Uses its own data dir and port; everything it starts is removed on exit (hack/down.sh --purge).
# Its pod range is the single-node cluster's too: run it while no other cluster runs here.
source "$(dirname "$0")/lib.sh"
source "$REPO_ROOT/hack/multinode.sh"

export MINIK8S_DATA_DIR="$(mktemp -d /tmp/minik8s-storage.XXXXXX)"
export MINIK8S_PORT="${MINIK8S_STORAGE_PORT:-16463}"
export MINIK8S_MERGE_KUBECONFIG="$MINIK8S_DATA_DIR/kubeconfig"
export MINIK8S_IMAGES="pause busybox"
export MINIK8S_DNS_RESOLV_CONF=/dev/null
DATA_DIR="$MINIK8S_DATA_DIR"
if [[ -z "${MINIK8S_KEEP:-}" ]]; then
  trap '"$REPO_ROOT/hack/down.sh" --purge >/dev/null 2>&1 || true' EXIT
fi
"$REPO_ROOT/hack/up.sh" --nodes 3
export KUBECONFIG="$DATA_DIR/admin.kubeconfig"
NS=e2e-storage
kubectl create namespace "$NS" >/dev/null

fail() {
  log "FAIL: $*"
  kubectl -n "$NS" get pods,pvc,statefulsets,controllerrevisions -o wide >&2 || true
  kubectl get pv -o wide >&2 || true
  exit 1
}
# The data dir of node $1: the host node's is the server's, worker mk8s-nodeK's its own.
node_dir() {
  case "$1" in
    mk8s-node*) mn_dir "${1#mk8s-node}" ;;
    *) echo "$DATA_DIR" ;;
  esac
}
# A pod of claim $2 that runs command $3, on node $4 when given.
pod() {
  local selector=""
  [[ -n "${4:-}" ]] && selector="nodeSelector: {kubernetes.io/hostname: $4}"
  kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  $selector
  containers:
  - {name: c, image: busybox:1.36, imagePullPolicy: Never, command: [sh, -c, "$3"],
     volumeMounts: [{name: data, mountPath: /data}]}
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: $2}}
EOF
}
succeeded() {
  kubectl -n "$NS" wait "pod/$1" --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s >/dev/null ||
    fail "pod $1 did not succeed: $(kubectl -n "$NS" describe pod "$1" | tail -15)"
}

log "WaitForFirstConsumer: one claim per node, provisioned on its pod's node"
mapfile -t NODES < <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
((${#NODES[@]} == 3)) || fail "expected 3 nodes, got ${NODES[*]}"
for i in 0 1 2; do
  kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-$i}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Mi}}
EOF
  pod "writer-$i" "data-$i" "echo written on ${NODES[$i]} > /data/f" "${NODES[$i]}"
done
for i in 0 1 2; do
  succeeded "writer-$i"
  node="${NODES[$i]}"
  [[ "$(kubectl -n "$NS" get pvc "data-$i" -o jsonpath='{.status.phase}')" == Bound ]] || fail "data-$i not Bound"
  pv="$(kubectl -n "$NS" get pvc "data-$i" -o jsonpath='{.spec.volumeName}')"
  pinned="$(kubectl get pv "$pv" -o jsonpath='{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}')"
  [[ "$pinned" == "$node" ]] || fail "$pv is pinned to '$pinned', its pod ran on $node"
  path="$(kubectl get pv "$pv" -o jsonpath='{.spec.local.path}{.spec.hostPath.path}')"
  dir="$(node_dir "$node")"
  in_dir=false
  if [[ "$path" == "$dir/"* ]] && { [[ "$node" == mk8s-node* ]] || [[ "$path" != "$DATA_DIR/nodes/"* ]]; }; then
    in_dir=true
  fi
  $in_dir || fail "$pv's directory $path is not in $node's data dir $dir"
  [[ "$(cat "$path/f")" == "written on $node" ]] || fail "$path/f holds '$(cat "$path/f" 2>&1)'"
done

log "a second pod of each claim follows the volume to its node and reads the data"
for i in 0 1 2; do
  pod "reader-$i" "data-$i" "cat /data/f"
done
for i in 0 1 2; do
  succeeded "reader-$i"
  ran="$(kubectl -n "$NS" get pod "reader-$i" -o jsonpath='{.spec.nodeName}')"
  [[ "$ran" == "${NODES[$i]}" ]] || fail "reader-$i ran on $ran, its volume is on ${NODES[$i]}"
  [[ "$(kubectl -n "$NS" logs "reader-$i")" == "written on ${NODES[$i]}" ]] || fail "reader-$i read '$(kubectl -n "$NS" logs "reader-$i")'"
done

log "deleting the claims removes their volumes and directories (reclaim Delete)"
paths=()
for i in 0 1 2; do
  paths+=("$(kubectl get pv "$(kubectl -n "$NS" get pvc "data-$i" -o jsonpath='{.spec.volumeName}')" -o jsonpath='{.spec.local.path}{.spec.hostPath.path}')")
done
kubectl -n "$NS" delete pod --all --wait=true >/dev/null
kubectl -n "$NS" delete pvc --all --wait=true --timeout=60s >/dev/null || fail "the claims were not deleted"
wait_for 60 sh -c "! kubectl get pv -o jsonpath='{.items[*].spec.claimRef.namespace}' | grep -qw $NS" ||
  fail "volumes left: $(kubectl get pv -o name)"
for p in "${paths[@]}"; do
  [[ ! -e "$p" ]] || fail "directory $p is still there"
done

log "kill -9 of the server in the middle of a StatefulSet rollout"
kubectl -n "$NS" apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  replicas: 3
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - {name: c, image: busybox:1.36, imagePullPolicy: Never, command: [sleep, "1000000"],
         env: [{name: V, value: "1"}],
         readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}}
EOF
kubectl -n "$NS" rollout status sts/web --timeout=180s >/dev/null || fail "the StatefulSet did not come up"
old="$(kubectl -n "$NS" get sts web -o jsonpath='{.status.currentRevision}')"
kubectl -n "$NS" set env sts/web V=2 >/dev/null
# The rollout has begun once the highest ordinal runs the new revision; the kill lands while
# the lower ones are still old.
wait_for 60 sh -c "kubectl -n $NS get pod web-2 -o jsonpath='{.metadata.labels.controller-revision-hash}' | grep -qv '^$old\$'" ||
  fail "the rollout did not start"
server_pid="$(cat "$DATA_DIR/server.pid")"
kill -9 "$server_pid"
# Until it is gone hack/up.sh would take it for a running server and stop the whole cluster.
wait_for 30 sh -c "! kill -0 $server_pid" || fail "the killed server did not exit"
log "server killed; starting it again (the worker nodes keep running)"
"$REPO_ROOT/hack/up.sh" --nodes 3 >/dev/null
kubectl -n "$NS" rollout status sts/web --timeout=180s >/dev/null || fail "the rollout did not finish after the restart"
new="$(kubectl -n "$NS" get sts web -o jsonpath='{.status.updateRevision}')"
[[ "$new" != "$old" ]] || fail "no new revision"
[[ "$(kubectl -n "$NS" get sts web -o jsonpath='{.status.currentRevision}')" == "$new" ]] || fail "currentRevision is not $new"
pods="$(kubectl -n "$NS" get pods -l app=web -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.labels.controller-revision-hash} {end}')"
[[ "$pods" == "web-0=$new web-1=$new web-2=$new " ]] || fail "pods after the rollout: $pods (want every one at $new)"
revisions="$(kubectl -n "$NS" get controllerrevisions -o jsonpath='{range .items[*]}{.metadata.name}:{.revision} {end}')"
[[ "$(wc -w <<<"$revisions")" == 2 && "$revisions" == *"$old:1"* && "$revisions" == *"$new:2"* ]] ||
  fail "revisions after the rollout: $revisions (want $old:1 and $new:2)"
log "storage across nodes and a StatefulSet rollout across a kill -9 of the server work"
