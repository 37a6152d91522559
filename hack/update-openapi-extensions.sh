#!/usr/bin/env bash
# Regenerates apiserver/src/handlers/openapi/upstream-extensions.json: the x-kubernetes-*
# extensions (patch strategy and merge key, list type and map keys, map type, unions) that
# upstream's OpenAPI v3 documents carry and k8s-openapi's schemars output lacks.
#
# Usage: hack/update-openapi-extensions.sh <dir>
#   <dir> holds upstream's per-group-version OpenAPI v3 documents of the Kubernetes minor the
#   server serves, searched recursively for *.json: kubernetes/kubernetes
#   api/openapi-spec/v3 at a release tag, or kubernetes-sigs/kubectl-validate
#   pkg/openapiclient/builtins/<minor>.
set -euo pipefail

if [[ $# -ne 1 || ! -d "$1" ]]; then
    echo "usage: $0 <directory of upstream OpenAPI v3 documents>" >&2
    exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/apiserver/src/handlers/openapi/upstream-extensions.json"

find "$1" -name '*.json' -print0 | sort -z | xargs -0 jq -s -r '
  def ext: with_entries(select((.key | startswith("x-kubernetes-"))
                               and .key != "x-kubernetes-group-version-kind"));
  [ .[] | (.components.schemas // {}) | to_entries[]
    | { key: .key,
        value: ({ "": (.value | ext) }
                + ((.value.properties // {}) | map_values(ext))
                | with_entries(select(.value != {}))) }
    | select(.value != {}) ]
  | from_entries
  | to_entries | sort_by(.key)
  | "{\n" + (map("  \(.key | tojson): \(.value | tojson)") | join(",\n")) + "\n}"
' > "$out.tmp"
jq -e 'type == "object" and length > 0' "$out.tmp" > /dev/null
mv "$out.tmp" "$out"
echo "wrote $(jq length "$out") schemas to ${out#"$root"/}"
