#!/usr/bin/env bash
# Checks GPUs end to end on a machine with an NVIDIA GPU and its driver: starts a one-node
# cluster (hack/up.sh), waits until the node's NVIDIA device plugin has put nvidia.com/gpu in
# its allocatable, and runs Jobs that ask for `nvidia.com/gpu: 1`:
#   gpu-check         (busybox) nvidia-smi, and vector_add.cu compiled with the node's nvcc
#   gpu-check-python  (python:3, when that image exists) a CUDA kernel through the driver API
# then prints their logs, Job status and the PodResources view of the devices.
# Needs no registry and no network: images come from files on this machine (a static busybox
# when Debian's busybox cannot be fetched); programs built on the node run in the pod with
# the node's loader and C/C++ libraries, bundled under <data-dir>/gpu-check.
# Usage: hack/gpu-check.sh      (MINIK8S_DATA_DIR, MINIK8S_BIN, MINIK8S_PORT as for up.sh)
# The cluster stays up afterwards; hack/down.sh stops it.
source "$(dirname "$0")/lib.sh"
HERE="$REPO_ROOT/hack/gpu-check"

[[ -e /dev/nvidia0 ]] || { log "no /dev/nvidia0: this machine has no NVIDIA GPU (or no driver)"; exit 1; }
log "the host's GPUs:"
nvidia-smi -L || log "nvidia-smi -L failed on the host"

if [[ -z "${MINIK8S_BIN:-}" ]]; then
  log "building minik8s (release)"
  cargo build --release --manifest-path "$REPO_ROOT/Cargo.toml" -p minik8s
fi
BIN="${MINIK8S_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/minik8s}"
export MINIK8S_BIN="$BIN"

# Images from this machine's files; python only when it can be built (apt must reach a mirror,
# or its packages must be cached already).
mkdir -p "$DATA_DIR/images"
images=(pause busybox)
build_image() {
  local extra=()
  if [[ "$1" == busybox ]] && command -v busybox >/dev/null && ! ldd "$(command -v busybox)" >/dev/null 2>&1; then
    extra=(--busybox "$(command -v busybox)")
  fi
  "$BIN" image build --out "$DATA_DIR/images" --cache-dir "$DATA_DIR/images/cache" "${extra[@]}" "$1"
}
for image in pause busybox python; do
  if [[ ! -f "$DATA_DIR/images/$image.tar" ]]; then
    log "building the $image image"
    if ! build_image "$image"; then
      [[ "$image" == python ]] || { log "cannot build the $image image"; exit 1; }
      log "no python image (no package mirror?): the driver-API check is skipped"
    fi
  fi
done
[[ -f "$DATA_DIR/images/python.tar" ]] && images+=(python)

# vector_add.cu, compiled with the node's nvcc, and the node's loader and libraries for it
# and for nvidia-smi (the driver's own libraries come from the device plugin's mounts).
BUNDLE="$DATA_DIR/gpu-check/bundle"
rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/lib"
NVCC="$(command -v nvcc || true)"
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
if [[ -n "$NVCC" ]]; then
  log "compiling vector_add.cu with $NVCC ($("$NVCC" --version | tail -n 1))"
  "$NVCC" -O2 -o "$BUNDLE/vector_add" "$HERE/vector_add.cu" || log "nvcc failed: vector_add is skipped"
else
  log "no nvcc on this node: vector_add is skipped"
fi
for program in "$BUNDLE/vector_add" "$(command -v nvidia-smi || true)"; do
  [[ -n "$program" && -x "$program" ]] || continue
  ldd "$program" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}' |
    grep -Ev '/lib(cuda|nvidia-)' | while read -r lib; do cp -L "$lib" "$BUNDLE/lib/"; done
done

log "starting the cluster (hack/up.sh) with images: ${images[*]}"
MINIK8S_IMAGES="${images[*]}" "$REPO_ROOT/hack/up.sh" >/dev/null
export KUBECONFIG="$DATA_DIR/admin.kubeconfig"
NODE="$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')"
gpus() { kubectl get node "$NODE" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}'; }
has_gpus() { [[ "$(gpus)" =~ ^[1-9][0-9]*$ ]]; }
if ! wait_for 60 has_gpus; then
  log "node $NODE has no nvidia.com/gpu in its allocatable; the server log says:"
  grep -iE 'nvidia|device' "$DATA_DIR/server.log" | tail -n 20 >&2
  exit 1
fi
log "node $NODE: nvidia.com/gpu capacity $(kubectl get node "$NODE" -o jsonpath='{.status.capacity.nvidia\.com/gpu}'), allocatable $(gpus)"

kubectl delete job gpu-check gpu-check-python --ignore-not-found --cascade=foreground --wait=true >/dev/null
kubectl delete configmap gpu-check --ignore-not-found >/dev/null
kubectl create configmap gpu-check --from-file="$HERE/run.sh" --from-file="$HERE/cuda_check.py" \
  --from-file="$HERE/vector_add.cu" >/dev/null

job() { # name image command...
  local name="$1" image="$2"; shift 2
  local cmd; cmd="$(printf '"%s",' "$@")"
  kubectl apply -f - >/dev/null <<YAML
apiVersion: batch/v1
kind: Job
metadata: {name: $name}
spec:
  backoffLimit: 0
  activeDeadlineSeconds: 300
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: cuda
        image: $image
        imagePullPolicy: Never
        command: [${cmd%,}]
        resources: {limits: {nvidia.com/gpu: 1}}
        volumeMounts:
        - {name: check, mountPath: /check}
        - {name: bundle, mountPath: /bundle, readOnly: true}
      volumes:
      - {name: check, configMap: {name: gpu-check}}
      - {name: bundle, hostPath: {path: $BUNDLE, type: Directory}}
YAML
}
report() { # name
  local name="$1" pod
  if ! kubectl wait --for=condition=Complete "job/$name" --timeout=300s >/dev/null 2>&1; then
    log "job $name did not complete"
  fi
  pod="$(kubectl get pods -l "job-name=$name" -o jsonpath='{.items[0].metadata.name}')"
  log "job $name: pod $pod on $(kubectl get pod "$pod" -o jsonpath='{.spec.nodeName}'), logs:"
  kubectl logs "$pod" || true
  log "job $name status:"
  kubectl get job "$name" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason} {.message}{"\n"}{end}succeeded={.status.succeeded} failed={.status.failed}{"\n"}'
  kubectl get pod "$pod" -o jsonpath='pod phase={.status.phase}, exit code={.status.containerStatuses[0].state.terminated.exitCode}{"\n"}'
  [[ "$(kubectl get job "$name" -o jsonpath='{.status.succeeded}')" == 1 ]]
}

status=0
job gpu-check docker.io/library/busybox:1.36 sh /check/run.sh
report gpu-check || status=1
if [[ " ${images[*]} " == *" python "* ]]; then
  # One GPU: this Job's pod is scheduled once the first one has finished and freed it.
  job gpu-check-python docker.io/library/python:3 python3 /check/cuda_check.py
  report gpu-check-python || status=1
fi
POD_RESOURCES="$DATA_DIR/kubelet/pod-resources/kubelet.sock"
[[ -S "$POD_RESOURCES" ]] && log "PodResources socket: $POD_RESOURCES"
log "node allocatable nvidia.com/gpu after the Jobs: $(gpus)"
if ((status)); then log "GPU check FAILED"; else log "GPU check passed"; fi
exit "$status"
