# Shared helpers for hack/ scripts. Source it; it sets strict mode.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_DIR="${MINIK8S_DATA_DIR:-/var/lib/minik8s}"

log() { printf '==> %s\n' "$*" >&2; }

# Installs the Debian packages minik8s needs (hack/packages.txt), only those missing.
wanted_packages() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$REPO_ROOT/hack/packages.txt" | awk '{print $1}'; }
install_packages() {
  local missing=()
  for p in $(wanted_packages); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Packages with a service (prometheus, containerd, etcd-server) would start it: the
    # cluster runs its own copies, on ports of their own. Debian's policy-rc.d says no
    # to every start while they install, unless the machine has a policy already.
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [[ ! -e "$policy" ]]; then
      printf '#!/bin/sh\n# hack/lib.sh: no service starts while it installs packages\nexit 101\n' >"$policy"
      chmod 755 "$policy"
      own_policy=1
    fi
    apt-get update -q || true
    local rc=0
    apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
    ((own_policy)) && rm -f "$policy"
    return "$rc"
  fi
}

# Waits until a command succeeds, up to $1 seconds.
wait_for() {
  local timeout="$1"; shift
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then return 1; fi
    sleep 0.2
  done
}

# Stops the process whose pid is in file $1 (TERM, then KILL after 10 s) and removes the file.
stop_pidfile() {
  local pid
  [[ -f "$1" ]] || return 0
  pid="$(cat "$1")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}
