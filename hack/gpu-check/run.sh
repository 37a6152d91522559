# What the gpu-check Job's pod runs (with busybox's or the image's sh): it reports what the
# container was given and runs the CUDA programs that can run in it. /bundle (a hostPath the
# script fills) holds the node's dynamic loader and C/C++ libraries, so host-built programs
# run even in an image without a libc; the driver's libraries come from the device plugin.
set -u
status=0
say() { echo "== $*"; }
say "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-<unset>}"
say "device nodes:"; ls -l /dev/nvidia* 2>&1
LOADER=$(ls /bundle/lib/ld-linux-* 2>/dev/null | head -n 1)
LIBS="/bundle/lib:/usr/lib/x86_64-linux-gnu:/usr/lib64:/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}"
host_run() {
  if [ -n "$LOADER" ]; then "$LOADER" --library-path "$LIBS" "$@"; else "$@"; fi
}
if [ -e /usr/bin/nvidia-smi ]; then
  say "nvidia-smi -L"; host_run /usr/bin/nvidia-smi -L || status=1
  say "nvidia-smi"; host_run /usr/bin/nvidia-smi || status=1
else
  say "nvidia-smi was not mounted (the device plugin found none on the node)"; status=1
fi
if [ -x /bundle/vector_add ]; then
  say "vector_add (vector_add.cu, compiled with the node's nvcc)"
  host_run /bundle/vector_add || status=1
else
  say "vector_add: not built (no nvcc on the node)"
fi
if command -v python3 >/dev/null 2>&1; then
  say "cuda_check.py (driver API through ctypes, kernel as PTX)"
  python3 /check/cuda_check.py || status=1
else
  say "cuda_check.py: no python3 in this image"
fi
say "exit $status"
exit $status
