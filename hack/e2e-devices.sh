#!/usr/bin/env bash
# Devices on a real node: `minik8s device-plugin fake` (devices that are files) registers with
# the kubelet of the cluster hack/up.sh started (the one in $MINIK8S_DATA_DIR), and then
#   - the node's capacity and allocatable show example.com/dev: 2;
#   - two pods asking for one each run on containerd with different devices (the file mounted
#     at /dev/fake/<id>, EXAMPLE_COM_DEV_VISIBLE_DEVICES naming it);
#   - a third stays Pending with the scheduler's "Insufficient example.com/dev", and runs
#     with the freed device once one of the others is deleted;
#   - a device listed in the plugin's `unhealthy` file leaves allocatable (capacity stays);
#   - a Job asking for a device completes, its output in its pod's log;
#   - when the plugin stops, allocatable drops to 0.
source "$(dirname "$0")/lib.sh"

export KUBECONFIG="$DATA_DIR/admin.kubeconfig"
BIN="${MINIK8S_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/minik8s}"
NS="e2e-devices-$$"
WORK="$(mktemp -d)"
PLUGIN_PID=""
cleanup() {
  if [[ -n "$PLUGIN_PID" ]]; then kill "$PLUGIN_PID" 2>/dev/null || true; fi
  kubectl delete ns "$NS" --wait=false >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  log "FAIL: $*"
  kubectl -n "$NS" get pods -o wide >&2 || true
  tail -20 "$WORK/plugin.log" >&2 || true
  exit 1
}

NODE="$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')"
dev() { kubectl get node "$NODE" -o jsonpath="{.status.$1.example\\.com/dev}"; }

log "the fake device plugin registers with $NODE's kubelet"
"$BIN" device-plugin fake --data-dir "$DATA_DIR" --resource example.com/dev --count 2 \
  --state-dir "$WORK/devices" >"$WORK/plugin.log" 2>&1 &
PLUGIN_PID=$!
wait_for 60 sh -c "[ \"\$(kubectl get node $NODE -o jsonpath='{.status.allocatable.example\\.com/dev}')\" = 2 ]" ||
  fail "allocatable never showed example.com/dev: 2 (capacity '$(dev capacity)')"
[[ "$(dev capacity)" == 2 ]] || fail "capacity is '$(dev capacity)'"

kubectl create ns "$NS" >/dev/null
pod() {
  kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, 'echo "visible=\$EXAMPLE_COM_DEV_VISIBLE_DEVICES"; cat /dev/fake/*; exec sleep 3600']
    resources:
      limits: {example.com/dev: 1}
EOF
}
running() { kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null | grep -q Running; }
visible() { kubectl -n "$NS" logs "$1" 2>/dev/null | sed -n 's/^visible=//p'; }

log "two pods, one device each"
pod a
pod b
wait_for 90 sh -c "kubectl -n $NS get pod a b -o jsonpath='{.items[*].status.phase}' | grep -qx 'Running Running'" ||
  fail "pods a and b did not both run"
wait_for 30 sh -c "kubectl -n $NS logs a | grep -q 'example.com/dev dev-' && kubectl -n $NS logs b | grep -q 'example.com/dev dev-'" ||
  fail "a pod did not see its device file"
A="$(visible a)"
B="$(visible b)"
[[ "$A" =~ ^dev-[01]$ && "$B" =~ ^dev-[01]$ && "$A" != "$B" ]] || fail "devices not exclusive: a=$A b=$B"
kubectl -n "$NS" logs a | grep -qx "example.com/dev $A" || fail "pod a's /dev/fake holds another device than $A"
log "a got $A, b got $B"

log "a third pod waits for a device"
pod c
wait_for 30 sh -c "kubectl -n $NS get events --field-selector involvedObject.name=c,reason=FailedScheduling -o jsonpath='{.items[*].message}' | grep -q 'Insufficient example.com/dev'" ||
  fail "pod c was not refused for Insufficient example.com/dev"
running c && fail "pod c runs without a free device"
kubectl -n "$NS" delete pod a --wait=true >/dev/null
wait_for 90 sh -c "kubectl -n $NS get pod c -o jsonpath='{.status.phase}' | grep -q Running" ||
  fail "pod c did not run after a's device was freed"
wait_for 30 sh -c "kubectl -n $NS logs c | grep -q '^visible='" || fail "pod c printed nothing"
[[ "$(visible c)" == "$A" ]] || fail "pod c got '$(visible c)', not the freed $A"

log "a device going unhealthy leaves allocatable"
echo "$A" >"$WORK/devices/unhealthy"
wait_for 30 sh -c "[ \"\$(kubectl get node $NODE -o jsonpath='{.status.allocatable.example\\.com/dev}')\" = 1 ]" ||
  fail "allocatable is '$(dev allocatable)' with $A unhealthy"
[[ "$(dev capacity)" == 2 ]] || fail "capacity changed to '$(dev capacity)'"
: >"$WORK/devices/unhealthy"
wait_for 30 sh -c "[ \"\$(kubectl get node $NODE -o jsonpath='{.status.allocatable.example\\.com/dev}')\" = 2 ]" ||
  fail "allocatable did not come back to 2"

log "a Job that asks for a device"
kubectl -n "$NS" delete pod b c --wait=true >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<'EOF'
apiVersion: batch/v1
kind: Job
metadata: {name: with-device}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
        command: [sh, -c, 'test -n "$EXAMPLE_COM_DEV_VISIBLE_DEVICES" && cat /dev/fake/$EXAMPLE_COM_DEV_VISIBLE_DEVICES']
        resources:
          requests: {example.com/dev: 1}
          limits: {example.com/dev: 1}
EOF
kubectl -n "$NS" wait --for=condition=Complete job/with-device --timeout=90s >/dev/null ||
  fail "the Job did not complete"
kubectl -n "$NS" logs job/with-device | grep -q '^example.com/dev dev-' || fail "the Job's log has no device"

log "the plugin stops: nothing is allocatable"
kill "$PLUGIN_PID"
wait "$PLUGIN_PID" 2>/dev/null || true
PLUGIN_PID=""
wait_for 30 sh -c "[ \"\$(kubectl get node $NODE -o jsonpath='{.status.allocatable.example\\.com/dev}')\" = 0 ]" ||
  fail "allocatable is '$(dev allocatable)' after the plugin stopped"
log "devices: registration, exclusive allocation, scheduling, health, a Job and the plugin's end all work"
