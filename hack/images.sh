#!/usr/bin/env bash
# Builds the node's container images as OCI image layout tarballs in <data-dir>/images/
# (data dir /var/lib/minik8s, or $MINIK8S_DATA_DIR), from files on this machine: no registry.
#   pause    registry.k8s.io/pause:3.9        hack/images/pause.c, gcc -static
#   busybox  docker.io/library/busybox:1.36   Debian's busybox-static
#   python   docker.io/library/python:3       Debian 12's python3 packages (apt-get download,
#                                             cached in <data-dir>/images/cache)
#   prometheus quay.io/prometheus/prometheus:v<version of the installed prometheus>
#                                             /usr/bin/prometheus (Debian's) and the
#                                             libraries it loads (libc, ld.so)
# Usage: hack/images.sh [pause|busybox|python|prometheus|all]...   (default: all)
# Import them into a containerd with: minik8s image import --address <socket> <data-dir>/images
source "$(dirname "$0")/lib.sh"

images=("${@:-all}")
install_packages
if [[ " ${images[*]} " == *" python "* || " ${images[*]} " == *" all "* ]]; then
  # The python image is made of Debian packages: apt must know their candidates.
  if ! apt-cache show --no-all-versions python3.11-minimal >/dev/null 2>&1; then
    log "apt-get update (no package lists yet)"
    apt-get update -q
  fi
fi

if [[ -z "${MINIK8S_BIN:-}" ]]; then
  log "building minik8s (release)"
  cargo build --release --manifest-path "$REPO_ROOT/Cargo.toml" -p minik8s
fi
BIN="${MINIK8S_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/minik8s}"

OUT="$DATA_DIR/images"
mkdir -p "$OUT"
log "building ${images[*]} into $OUT"
"$BIN" image build --out "$OUT" --cache-dir "$OUT/cache" "${images[@]}"
