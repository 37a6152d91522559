#!/usr/bin/env python3
"""Regenerates apiserver/src/protobuf/schema.json: how upstream's protobuf messages map to the
JSON the server speaks, for every built-in kind it serves.

Usage: hack/update-protobuf-schema.py <dir>
  <dir> holds upstream's Go modules at the release tag of the Kubernetes minor the server
  serves, one directory each, named as the module's path without `k8s.io/`: <dir>/api
  (k8s.io/api), <dir>/apimachinery (k8s.io/apimachinery), <dir>/apiextensions-apiserver
  (k8s.io/apiextensions-apiserver) and <dir>/kube-aggregator (k8s.io/kube-aggregator).

The message structure (field numbers, types, repetition) comes from the generated.proto files;
what the protos do not say comes from the Go types they were generated from: the JSON name of
each field (`json:"..."`), whether it is embedded inline in its parent's JSON (`json:",inline"`),
and whether a zero scalar on the wire is a value (a Go pointer, or a field without omitempty) or
just the Go zero value that the JSON form omits.

Output: {"<proto package>.<Message>": [[number, jsonName, type, flags], ...], ...}, one message a
line. type is a scalar (string, bytes, bool, int32, int64, double), a message's full name, or
"map:<key>:<value>". flags: r = repeated, i = inline in the parent's JSON, z = a zero scalar is
kept (a scalar that is a Go pointer or has no omitempty).
"""

import json
import os
import re
import sys

# The Go packages whose protos are included (with everything they import).
PACKAGES = [
    "api/core/v1",
    "api/admissionregistration/v1",
    "api/apps/v1",
    "api/batch/v1",
    "api/autoscaling/v1",
    "api/autoscaling/v2",
    "api/networking/v1",
    "api/discovery/v1",
    "api/coordination/v1",
    "api/storage/v1",
    "api/rbac/v1",
    "api/events/v1",
    "api/policy/v1",
    "api/authentication/v1",
    "api/authorization/v1",
    "api/certificates/v1",
    "api/flowcontrol/v1",
    "api/node/v1",
    "api/scheduling/v1",
    "apiextensions-apiserver/pkg/apis/apiextensions/v1",
    "kube-aggregator/pkg/apis/apiregistration/v1",
    "apimachinery/pkg/apis/meta/v1",
    "apimachinery/pkg/runtime",
    "apimachinery/pkg/runtime/schema",
    "apimachinery/pkg/util/intstr",
    "apimachinery/pkg/api/resource",
]

SCALARS = {"string", "bytes", "bool", "int32", "int64", "double", "float", "uint32", "uint64"}


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def parse_proto(path):
    text = strip_comments(open(path).read())
    package = re.search(r"^package\s+([\w.]+);", text, re.M).group(1)
    go_package = re.search(r'option go_package = "([^"]+)";', text).group(1)
    imports = re.findall(r'^import "([^"]+)";', text, re.M)
    messages = {}
    for m in re.finditer(r"message\s+(\w+)\s*\{([^{}]*)\}", text):
        fields = []
        for f in re.finditer(
            r"(optional|repeated)?\s*(map<\s*[\w.]+\s*,\s*[\w.]+\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;",
            m.group(2),
        ):
            label, ty, name, number = f.groups()
            fields.append((int(number), name, ty, label == "repeated"))
        messages[m.group(1)] = fields
    return package, go_package, imports, messages


def qualify(ty, package, known):
    if ty in SCALARS:
        return ty
    mm = re.match(r"map<\s*([\w.]+)\s*,\s*([\w.]+)\s*>", ty)
    if mm:
        return "map:%s:%s" % (qualify(mm.group(1), package, known), qualify(mm.group(2), package, known))
    if "." in ty:
        return ty.lstrip(".")
    full = package + "." + ty
    if full not in known:
        raise SystemExit("unresolved type %s in %s" % (ty, package))
    return full


STRUCT = re.compile(r"^type\s+(\w+)\s+struct\s*\{")
FIELD = re.compile(r"^\s*(\w+(?:\.\w+)?)(?:\s+([^`]+?))?\s*`([^`]*)`")


def parse_go(directory):
    """Go struct fields with a protobuf tag: {struct: {number: (json, inline, zero_kept)}}."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".go") or name.endswith("_test.go") or name.startswith("zz_generated"):
            continue
        current = None
        for line in open(os.path.join(directory, name)):
            s = STRUCT.match(line)
            if s:
                current = out.setdefault(s.group(1), {})
                continue
            if current is None:
                continue
            if line.startswith("}"):
                current = None
                continue
            f = FIELD.match(line)
            if not f:
                continue
            first, go_type, tag = f.groups()
            pb = re.search(r'protobuf:"[a-z0-9]+,(\d+),', tag)
            if not pb:
                continue
            js = re.search(r'json:"([^"]*)"', tag)
            parts = js.group(1).split(",") if js else [first]
            json_name = parts[0]
            inline = "inline" in parts[1:]
            omitempty = "omitempty" in parts[1:]
            pointer = go_type is not None and go_type.startswith("*")
            if go_type is None:
                # An embedded field: its type is the first token.
                inline = inline or not json_name
            if not json_name and not inline:
                json_name = first
            current[int(pb.group(1))] = (json_name, inline, pointer or not omitempty)
    return out


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    src = sys.argv[1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_path = os.path.join(root, "apiserver", "src", "protobuf", "schema.json")

    files = {}
    todo = list(PACKAGES)
    while todo:
        pkg = todo.pop()
        if pkg in files:
            continue
        parsed = parse_proto(os.path.join(src, pkg, "generated.proto"))
        files[pkg] = parsed
        for imp in parsed[2]:
            todo.append(os.path.dirname(imp[len("k8s.io/"):]))

    known = set()
    for package, _, _, messages in files.values():
        known.update(package + "." + m for m in messages)

    schema = {}
    missing = []
    for pkg, (package, go_package, _, messages) in sorted(files.items()):
        go = parse_go(os.path.join(src, go_package[len("k8s.io/"):]))
        for msg, fields in messages.items():
            go_fields = go.get(msg, {})
            rows = []
            for number, name, ty, repeated in sorted(fields):
                json_name, inline, zero = go_fields.get(number, (name, False, False))
                if number not in go_fields:
                    missing.append("%s.%s.%s" % (package, msg, name))
                ty = qualify(ty, package, known)
                zero = zero and not repeated and ty in SCALARS
                flags = ("r" if repeated else "") + ("i" if inline else "") + ("z" if zero else "")
                rows.append([number, json_name, ty, flags])
            schema[package + "." + msg] = rows

    with open(out_path + ".tmp", "w") as f:
        f.write("{\n")
        f.write(",\n".join("%s: %s" % (json.dumps(k), json.dumps(schema[k], separators=(",", ":"))) for k in sorted(schema)))
        f.write("\n}\n")
    os.replace(out_path + ".tmp", out_path)
    print("wrote %d messages to %s" % (len(schema), os.path.relpath(out_path, root)))
    if missing:
        print("fields without a Go protobuf tag (JSON name taken from the proto): %d" % len(missing))
        for m in missing:
            print("  " + m)


if __name__ == "__main__":
    main()
