#!/usr/bin/env python3
"""Regenerates api/src/patch/go-zero-fields.json: for each built-in schema (by OpenAPI
definition name), the fields upstream's Go types always serialize even when unset, and what
they serialize as. Non-pointer struct fields are always present (Go's omitempty does not apply
to structs) and map to {} (their own zero fields follow from their schema); fields without
omitempty map to their zero value (null for pointers, slices and maps, "" / 0 / false for
scalars); types with their own JSON encoding map to what they encode as (metav1.Time: null,
resource.Quantity: "0", intstr.IntOrString: 0).

Upstream's field manager compares Go-typed objects, so these fields decide which fields a
manager owns on create (`f:resources: {}`) and which nodes are members (`.`).

Usage: hack/update-go-zero-fields.py <k8s.io/api> <k8s.io/apimachinery> <k8s.io/apiextensions-apiserver>
  each a checkout (or export) of the repository at the Kubernetes minor the server serves.
"""

import json
import os
import re
import sys

API_GROUPS = [
    "core/v1", "apps/v1", "batch/v1", "autoscaling/v1", "autoscaling/v2", "networking/v1",
    "discovery/v1", "coordination/v1", "storage/v1", "rbac/v1", "events/v1",
]

NULL, STRUCT, SKIP = object(), object(), object()
SPECIAL = {
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Time"): None,
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "MicroTime"): None,
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Duration"): "0s",
    ("k8s.io/apimachinery/pkg/api/resource", "Quantity"): "0",
    ("k8s.io/apimachinery/pkg/util/intstr", "IntOrString"): 0,
    ("k8s.io/apimachinery/pkg/runtime", "RawExtension"): None,
    ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", "JSON"): None,
}
SCALARS = {"string": "", "bool": False}
for t in ["int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32",
          "uint64", "float32", "float64", "byte", "rune"]:
    SCALARS[t] = 0


def definition_name(pkg, name):
    if pkg.startswith("k8s.io/api/"):
        return "io.k8s.api." + pkg[len("k8s.io/api/"):].replace("/", ".") + "." + name
    if pkg.startswith("k8s.io/apimachinery/"):
        return "io.k8s.apimachinery." + pkg[len("k8s.io/apimachinery/"):].replace("/", ".") + "." + name
    if pkg.startswith("k8s.io/apiextensions-apiserver/"):
        return "io.k8s.apiextensions-apiserver." + \
            pkg[len("k8s.io/apiextensions-apiserver/"):].replace("/", ".") + "." + name
    return None


def parse_file(path, pkg, types):
    src = open(path).read()
    imports = {}
    for block in re.findall(r"^import \((.*?)^\)", src, re.S | re.M):
        for line in block.splitlines():
            m = re.match(r'\s*(\w+)?\s*"([^"]+)"', line)
            if m:
                alias = m.group(1) or m.group(2).rsplit("/", 1)[-1]
                imports[alias] = m.group(2)
    for m in re.finditer(r'^import (\w+)? ?"([^"]+)"', src, re.M):
        imports[m.group(1) or m.group(2).rsplit("/", 1)[-1]] = m.group(2)
    for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", src, re.S | re.M):
        fields = []
        for line in m.group(2).splitlines():
            line = line.split("//", 1)[0].rstrip()
            fm = re.match(r"\s*(?:(\w+)\s+)?([\w.*\[\]]+(?:\[[\w.]+\][\w.*\[\]]+)?)\s+`([^`]*)`", line)
            if not fm:
                continue
            tag = re.search(r'json:"([^"]*)"', fm.group(3))
            if not tag:
                continue
            parts = tag.group(1).split(",")
            fields.append((parts[0], fm.group(2), "omitempty" in parts[1:], "inline" in parts[1:]))
        types[(pkg, m.group(1))] = ("struct", fields, imports)
    for m in re.finditer(r"^type (\w+) ([\w.*\[\]]+(?:\[[\w.]+\][\w.*\[\]]+)?)\s*$", src, re.M):
        if m.group(2) != "struct":
            types.setdefault((pkg, m.group(1)), ("alias", m.group(2), imports))


def qualify(pkg, typ, imports):
    if "." in typ:
        alias, name = typ.split(".", 1)
        return imports.get(alias, alias), name
    return pkg, typ


def zero(types, pkg, typ, omitempty, imports):
    """What a field of type `typ` serializes as when unset; SKIP when omitted."""
    if typ.startswith("*") or typ.startswith("[]") or typ.startswith("map["):
        return SKIP if omitempty else NULL
    if typ in SCALARS:
        return SKIP if omitempty else SCALARS[typ]
    key = qualify(pkg, typ, imports)
    if key in SPECIAL:
        return NULL if SPECIAL[key] is None else SPECIAL[key]
    decl = types.get(key)
    if decl is None:
        if key[1] in SCALARS:
            return SKIP if omitempty else SCALARS[key[1]]
        return SKIP
    if decl[0] == "struct":
        return STRUCT
    return zero(types, key[0], decl[1], omitempty, decl[2])


def struct_fields(types, key, seen=()):
    kind, fields, imports = types[key]
    out = {}
    for name, typ, omitempty, inline in fields:
        if name == "-":
            continue
        if inline or name == "":
            target = qualify(key[0], typ.lstrip("*"), imports)
            if target in types and types[target][0] == "struct" and target not in seen:
                out.update(struct_fields(types, target, seen + (key,)))
            continue
        z = zero(types, key[0], typ, omitempty, imports)
        if z is SKIP:
            continue
        out[name] = {} if z is STRUCT else (None if z is NULL else z)
    return out


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    api, machinery, apiext = sys.argv[1:]
    types = {}
    for g in API_GROUPS:
        parse_file(os.path.join(api, g, "types.go"), "k8s.io/api/" + g, types)
    meta = os.path.join(machinery, "pkg/apis/meta/v1")
    for f in ["types.go", "time.go", "micro_time.go", "duration.go"]:
        parse_file(os.path.join(meta, f), "k8s.io/apimachinery/pkg/apis/meta/v1", types)
    ext = os.path.join(apiext, "pkg/apis/apiextensions/v1")
    for f in ["types.go", "types_jsonschema.go"]:
        parse_file(os.path.join(ext, f), "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", types)
    table = {}
    for key, decl in sorted(types.items()):
        if decl[0] != "struct" or key in SPECIAL:
            continue
        name = definition_name(*key)
        fields = struct_fields(types, key)
        if name and fields:
            table[name] = dict(sorted(fields.items()))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = os.path.join(root, "api/src/patch/go-zero-fields.json")
    with open(out, "w") as f:
        f.write("{\n")
        f.write(",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v, separators=(",", ":")))
                           for k, v in table.items()))
        f.write("\n}\n")
    print("wrote %d schemas to %s" % (len(table), os.path.relpath(out, root)))


if __name__ == "__main__":
    main()
