#!/usr/bin/env bash
# Fails when this machine has Debian packages that a fresh machine set up by hack/lib.sh's
# install_packages would not have: packages installed by hand (or pulled in as Recommends of
# one) that the build or a test may silently rely on, as libprotobuf-dev and nftables once did.
# Expected = a fresh machine's packages (hack/fresh-machine-packages.txt, or the machine
# kind's own list in ../shared/tools when present) plus hack/packages.txt and everything
# those depend on (Depends and PreDepends: install_packages skips Recommends).
# Usage: hack/verify-packages.sh   (hack/test.sh runs it after installing the packages)
source "$(dirname "$0")/lib.sh"

base="$REPO_ROOT/../shared/tools/base-image-apt-packages.txt"
[[ -r "$base" ]] || base="$REPO_ROOT/hack/fresh-machine-packages.txt"

# What install_packages installs, with everything it depends on.
mapfile -t wanted < <(wanted_packages)
expected="$(mktemp)"
trap 'rm -f "$expected"' EXIT
{
  sed 's/:.*$//' "$base"
  printf '%s\n' "${wanted[@]}"
  apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${wanted[@]}" 2>/dev/null |
    grep -v '^ ' | sed -e 's/:.*$//' -e 's/[<>]//g'
} | sort -u >"$expected"

extra=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" {print $2}' |
  sed 's/:.*$//' | sort -u | comm -23 - "$expected")
if [[ -n "$extra" ]]; then
  log "installed here, but a fresh machine set up by hack/lib.sh would not have them:"
  printf '    %s\n' $extra >&2
  log "if the build or a test needs one, add it to hack/packages.txt (Recommends are not"
  log "installed: name them too); otherwise remove it (apt-get purge) so tests cannot lean on it"
  exit 1
fi
log "every installed package is on a fresh machine or in hack/packages.txt"
