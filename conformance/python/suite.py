#!/usr/bin/env python3
"""Conformance cases for the official Kubernetes Python client (pip `kubernetes`).

Driven by the Rust runner (conformance/src/python.rs), which creates the namespace and the
venv. Each case prints exactly one line on stdout:

    CASE<TAB>name<TAB>ok<TAB>milliseconds
    CASE<TAB>name<TAB>FAIL<TAB>one-line reason

Usage: suite.py --kubeconfig FILE --namespace NS --run ID [--tmp DIR] [CASE ...]
"""

import argparse
import os
import sys
import time
import traceback

from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException

CASES = {}


def case(name):
    def register(fn):
        CASES[name] = fn
        return fn

    return register


class Failed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def expect_api_error(status, fn, *args, **kwargs):
    """Calls fn and returns the ApiException it raises, failing unless its status is `status`."""
    try:
        got = fn(*args, **kwargs)
    except ApiException as e:
        check(e.status == status, "expected HTTP %d, got %d: %s" % (status, e.status, body_message(e)))
        return e
    raise Failed("expected HTTP %d, the call succeeded: %r" % (status, summarize(got)))


def body_message(e):
    import json

    try:
        return json.loads(e.body).get("message", e.body)
    except Exception:
        return e.body


def body_json(e):
    import json

    return json.loads(e.body)


def summarize(obj):
    s = repr(obj)
    return s if len(s) < 200 else s[:200] + "..."


def eventually(fn, what, limit=10.0, every=0.1):
    deadline = time.monotonic() + limit
    while True:
        try:
            return fn()
        except (Failed, ApiException) as e:
            if time.monotonic() >= deadline:
                raise Failed("%s (waited %d s): %s" % (what, limit, one_line(e)))
            time.sleep(every)


def one_line(e):
    if isinstance(e, ApiException):
        text = "HTTP %s %s: %s" % (e.status, e.reason, body_message(e))
    else:
        text = "%s: %s" % (type(e).__name__, e) if not isinstance(e, Failed) else str(e)
    return " | ".join(l.strip() for l in str(text).splitlines() if l.strip())


class Ctx:
    def __init__(self, args):
        self.api = config.new_client_from_config(config_file=args.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.ext = client.ApiextensionsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.kubeconfig = args.kubeconfig
        self.ns = args.namespace
        self.run = args.run
        self.tmp = args.tmp
        self._dynamic = None

    @property
    def dynamic(self):
        if self._dynamic is None:
            cache = os.path.join(self.tmp, "dynamic-discovery.json")
            self._dynamic = dynamic.DynamicClient(self.api, cache_file=cache)
        return self._dynamic


def configmap(name, data=None, labels=None):
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}), data=data or {}
    )


def deployment(name, containers):
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(
                    containers=[
                        client.V1Container(name=n, image=i, command=["sleep", "3600"])
                        for n, i in containers
                    ]
                ),
            ),
        ),
    )


def quietly(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except ApiException:
        pass


@case("crud")
def crud(c):
    name = "py-crud"
    quietly(c.core.delete_namespaced_config_map, name, c.ns)
    created = c.core.create_namespaced_config_map(
        c.ns, configmap(name, {"a": "1"}, {"suite": "py-crud"})
    )
    check(created.metadata.uid and created.metadata.resource_version, "no uid/resourceVersion")
    check(created.metadata.namespace == c.ns, "namespace %r" % created.metadata.namespace)
    got = c.core.read_namespaced_config_map(name, c.ns)
    check(got.data == {"a": "1"}, "read data %r" % got.data)
    listed = c.core.list_namespaced_config_map(c.ns, label_selector="suite=py-crud")
    check([i.metadata.name for i in listed.items] == [name], "list %r" % listed.items)
    check(listed.metadata.resource_version, "list has no resourceVersion")
    everywhere = c.core.list_config_map_for_all_namespaces(label_selector="suite=py-crud")
    check(
        [(i.metadata.namespace, i.metadata.name) for i in everywhere.items] == [(c.ns, name)],
        "list across namespaces",
    )
    stale = c.core.read_namespaced_config_map(name, c.ns)
    got.data["b"] = "2"
    replaced = c.core.replace_namespaced_config_map(name, c.ns, got)
    check(replaced.data == {"a": "1", "b": "2"}, "replace data %r" % replaced.data)
    check(
        replaced.metadata.resource_version != created.metadata.resource_version,
        "resourceVersion unchanged by replace",
    )
    stale.data["c"] = "3"
    e = expect_api_error(409, c.core.replace_namespaced_config_map, name, c.ns, stale)
    check(body_json(e).get("reason") == "Conflict", "stale replace: %s" % e.body)
    e = expect_api_error(409, c.core.create_namespaced_config_map, c.ns, configmap(name))
    check(body_json(e).get("reason") == "AlreadyExists", "duplicate create: %s" % e.body)
    status = c.core.delete_namespaced_config_map(name, c.ns)
    check(status.status == "Success" or status.kind == "ConfigMap", "delete answered %r" % summarize(status))
    e = expect_api_error(404, c.core.read_namespaced_config_map, name, c.ns)
    details = body_json(e).get("details", {})
    check(
        details.get("name") == name and details.get("kind") == "configmaps",
        "404 details %r" % details,
    )

    # A Deployment and its scale subresource.
    dname = "py-deploy"
    quietly(c.apps.delete_namespaced_deployment, dname, c.ns)
    d = c.apps.create_namespaced_deployment(c.ns, deployment(dname, [("main", "busybox:1.36")]))
    check(d.spec.strategy.type == "RollingUpdate", "defaults: %r" % d.spec.strategy)
    scale = c.apps.read_namespaced_deployment_scale(dname, c.ns)
    check(scale.spec.replicas == 1, "scale %r" % scale.spec)
    # The deployment controller writes status meanwhile, so a read-modify-write can meet a 409
    # exactly as on Kubernetes; retry on conflict like client-go's RetryOnConflict.
    for attempt in range(10):
        scale.spec.replicas = 3
        try:
            c.apps.replace_namespaced_deployment_scale(dname, c.ns, scale)
            break
        except ApiException as e:
            if e.status != 409 or attempt == 9:
                raise
            scale = c.apps.read_namespaced_deployment_scale(dname, c.ns)
    check(
        c.apps.read_namespaced_deployment(dname, c.ns).spec.replicas == 3,
        "replicas after replacing scale",
    )
    c.apps.delete_namespaced_deployment(dname, c.ns)
    expect_api_error(404, c.apps.read_namespaced_deployment, dname, c.ns)


@case("errors")
def errors(c):
    e = expect_api_error(422, c.core.create_namespaced_config_map, c.ns, configmap("Not_Valid"))
    status = body_json(e)
    causes = status.get("details", {}).get("causes", [])
    check(status.get("reason") == "Invalid", "reason %r" % status.get("reason"))
    check(any(x.get("field") == "metadata.name" for x in causes), "causes %r" % causes)
    missing = "py-missing-" + c.run
    e = expect_api_error(404, c.core.create_namespaced_config_map, missing, configmap("x"))
    check('namespaces "%s" not found' % missing in body_message(e), body_message(e))
    e = expect_api_error(404, c.core.read_namespace, missing)
    check(body_json(e).get("reason") == "NotFound", e.body)


@case("watch-resume")
def watch_resume(c):
    sel = "watch=py"
    listed = c.core.list_namespaced_config_map(c.ns, label_selector=sel)
    check(listed.items == [], "leftovers %r" % listed.items)
    rv = listed.metadata.resource_version
    c.core.create_namespaced_config_map(c.ns, configmap("pyw-1", {"v": "1"}, {"watch": "py"}))

    def collect(resource_version, count):
        w = watch.Watch()
        seen = []
        for ev in w.stream(
            c.core.list_namespaced_config_map,
            c.ns,
            label_selector=sel,
            resource_version=resource_version,
            timeout_seconds=10,
            _request_timeout=15,
        ):
            obj = ev["object"]
            check(isinstance(obj, client.V1ConfigMap), "event object %r" % type(obj))
            seen.append((ev["type"], obj.metadata.name, obj.metadata.resource_version))
            if len(seen) >= count:
                w.stop()
        return seen, w

    seen, w = collect(rv, 1)
    check([s[:2] for s in seen] == [("ADDED", "pyw-1")], "from the list's resourceVersion: %r" % seen)
    check(w.resource_version == seen[-1][2], "Watch.resource_version %r" % w.resource_version)
    last = seen[-1][2]
    # Changes while nobody watches arrive when the watch resumes from the last event.
    c.core.patch_namespaced_config_map("pyw-1", c.ns, [{"op": "replace", "path": "/data/v", "value": "2"}])
    c.core.create_namespaced_config_map(c.ns, configmap("pyw-2", {}, {"watch": "py"}))
    c.core.delete_namespaced_config_map("pyw-1", c.ns)
    seen, _ = collect(last, 3)
    check(
        [s[:2] for s in seen] == [("MODIFIED", "pyw-1"), ("ADDED", "pyw-2"), ("DELETED", "pyw-1")],
        "resumed from the last event: %r" % [s[:2] for s in seen],
    )
    versions = [int(s[2]) for s in seen]
    check(versions == sorted(versions) and int(last) < versions[0], "resourceVersions %r" % versions)
    # timeoutSeconds: the server ends the watch, and the stream with it.
    started = time.monotonic()
    for _ in watch.Watch().stream(
        c.core.list_namespaced_config_map,
        c.ns,
        label_selector="watch=nobody",
        resource_version=seen[-1][2],
        timeout_seconds=1,
        _request_timeout=15,
    ):
        pass
    took = time.monotonic() - started
    check(took < 5, "a watch with timeoutSeconds=1 lasted %.1f s" % took)
    c.core.delete_namespaced_config_map("pyw-2", c.ns)


@case("patch-json")
def patch_json(c):
    name = "py-pj"
    quietly(c.core.delete_namespaced_config_map, name, c.ns)
    c.core.create_namespaced_config_map(c.ns, configmap(name, {"a": "1", "b": "2"}))
    # A list body is sent as application/json-patch+json.
    got = c.core.patch_namespaced_config_map(
        name,
        c.ns,
        [
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "replace", "path": "/data/a", "value": "10"},
            {"op": "remove", "path": "/data/b"},
            {"op": "add", "path": "/metadata/labels", "value": {"patched": "json"}},
        ],
    )
    check(got.data == {"a": "10"}, "data %r" % got.data)
    check(got.metadata.labels == {"patched": "json"}, "labels %r" % got.metadata.labels)
    rv = got.metadata.resource_version
    expect_api_error(
        422,
        c.core.patch_namespaced_config_map,
        name,
        c.ns,
        [{"op": "test", "path": "/data/a", "value": "1"}, {"op": "remove", "path": "/data/a"}],
    )
    check(
        c.core.read_namespaced_config_map(name, c.ns).metadata.resource_version == rv,
        "a failed test op changed the object",
    )
    c.core.delete_namespaced_config_map(name, c.ns)


@case("patch-merge")
def patch_merge(c):
    name = "py-pm"
    quietly(c.core.delete_namespaced_config_map, name, c.ns)
    c.core.create_namespaced_config_map(c.ns, configmap(name, {"a": "1", "b": "2"}))
    cms = c.dynamic.resources.get(api_version="v1", kind="ConfigMap")
    got = c.dynamic.patch(
        cms,
        body={"data": {"a": None, "c": "3"}},
        name=name,
        namespace=c.ns,
        content_type="application/merge-patch+json",
    )
    check(dict(got.data) == {"b": "2", "c": "3"}, "data %r" % got.data)
    # A merge patch replaces lists whole.
    dname = "py-pm-deploy"
    quietly(c.apps.delete_namespaced_deployment, dname, c.ns)
    c.apps.create_namespaced_deployment(
        c.ns, deployment(dname, [("main", "busybox:1.36"), ("side", "busybox:1.36")])
    )
    deploys = c.dynamic.resources.get(api_version="apps/v1", kind="Deployment")
    c.dynamic.patch(
        deploys,
        body={"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "busybox:1.37"}]}}}},
        name=dname,
        namespace=c.ns,
        content_type="application/merge-patch+json",
    )
    containers = c.apps.read_namespaced_deployment(dname, c.ns).spec.template.spec.containers
    check([x.name for x in containers] == ["side"], "containers %r" % [x.name for x in containers])
    c.core.delete_namespaced_config_map(name, c.ns)
    c.apps.delete_namespaced_deployment(dname, c.ns)


@case("patch-strategic")
def patch_strategic(c):
    dname = "py-ps-deploy"
    quietly(c.apps.delete_namespaced_deployment, dname, c.ns)
    c.apps.create_namespaced_deployment(
        c.ns, deployment(dname, [("main", "busybox:1.36"), ("side", "busybox:1.36")])
    )
    # A dict body is sent as application/strategic-merge-patch+json: containers merge by name.
    got = c.apps.patch_namespaced_deployment(
        dname,
        c.ns,
        {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "busybox:1.37"}]}}}},
    )
    pairs = [(x.name, x.image) for x in got.spec.template.spec.containers]
    check(pairs == [("main", "busybox:1.36"), ("side", "busybox:1.37")], "containers %r" % pairs)
    got = c.apps.patch_namespaced_deployment(
        dname,
        c.ns,
        {"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}},
    )
    pairs = [(x.name, x.image) for x in got.spec.template.spec.containers]
    check(pairs == [("main", "busybox:1.36")], "after $patch: delete %r" % pairs)
    got = c.core.patch_namespace(c.ns, {"metadata": {"labels": {"patched": "strategic"}}})
    check(got.metadata.labels.get("patched") == "strategic", "namespace labels %r" % got.metadata.labels)
    c.apps.delete_namespaced_deployment(dname, c.ns)


@case("patch-apply")
def patch_apply(c):
    name = "py-ssa"
    quietly(c.core.delete_namespaced_config_map, name, c.ns)
    cms = c.dynamic.resources.get(api_version="v1", kind="ConfigMap")
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"owner": "py-a", "keep": "yes"},
    }
    got = c.dynamic.server_side_apply(cms, body=body, namespace=c.ns, field_manager="py-a")
    managers = [(m.manager, m.operation) for m in got.metadata.managedFields]
    check(("py-a", "Apply") in managers, "managedFields %r" % managers)
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"owner": "py-b"}}
    try:
        c.dynamic.server_side_apply(cms, body=theirs, namespace=c.ns, field_manager="py-b")
        raise Failed("a conflicting apply succeeded")
    except dynamic.exceptions.ConflictError as e:
        check('conflict with "py-a"' in body_message(e), "conflict: %s" % body_message(e))
    got = c.dynamic.server_side_apply(
        cms, body=theirs, namespace=c.ns, field_manager="py-b", force_conflicts=True
    )
    check(dict(got.data) == {"owner": "py-b", "keep": "yes"}, "after force %r" % got.data)
    c.core.delete_namespaced_config_map(name, c.ns)


@case("custom-objects")
def custom_objects(c):
    group = "py-%s.conformance.minik8s.io" % c.run
    plural = "things"
    crd_name = "%s.%s" % (plural, group)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": "thing", "kind": "Thing", "listKind": "ThingList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}, "color": {"type": "string"}},
                                },
                                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
                            },
                        }
                    },
                }
            ],
        },
    }
    c.ext.create_custom_resource_definition(crd)
    try:
        custom_objects_with_crd(c, group, plural)
    finally:
        quietly(c.ext.delete_custom_resource_definition, crd_name)

    def crd_gone():
        expect_api_error(404, c.ext.read_custom_resource_definition, crd_name)

    eventually(crd_gone, "the CRD is removed after delete", limit=20)


def custom_objects_with_crd(c, group, plural):
    crd_name = "%s.%s" % (plural, group)

    def established():
        crd = c.ext.read_custom_resource_definition(crd_name)
        conds = {x.type: x.status for x in (crd.status.conditions or [])} if crd.status else {}
        check(conds.get("Established") == "True", "conditions %r" % conds)

    eventually(established, "CRD Established", limit=15)
    co = c.custom
    eventually(
        lambda: co.list_namespaced_custom_object(group, "v1", c.ns, plural),
        "the new kind is served",
        limit=10,
    )

    def thing(name, size):
        return {
            "apiVersion": "%s/v1" % group,
            "kind": "Thing",
            "metadata": {"name": name, "labels": {"suite": "py"}},
            "spec": {"size": size, "color": "blue"},
        }

    created = co.create_namespaced_custom_object(group, "v1", c.ns, plural, thing("t1", 3))
    check(created["metadata"].get("uid") and created["metadata"].get("generation") == 1, "created %r" % created["metadata"])
    got = co.get_namespaced_custom_object(group, "v1", c.ns, plural, "t1")
    check(got["spec"] == {"size": 3, "color": "blue"}, "spec %r" % got["spec"])
    listed = co.list_namespaced_custom_object(group, "v1", c.ns, plural, label_selector="suite=py")
    check(listed["kind"] == "ThingList", "list kind %r" % listed.get("kind"))
    check([i["metadata"]["name"] for i in listed["items"]] == ["t1"], "list %r" % listed["items"])
    everywhere = co.list_cluster_custom_object(group, "v1", plural)
    check(any(i["metadata"]["name"] == "t1" for i in everywhere["items"]), "cluster list")
    # A dict body is a merge patch for custom objects.
    patched = co.patch_namespaced_custom_object(group, "v1", c.ns, plural, "t1", {"spec": {"size": 5}})
    check(patched["spec"] == {"size": 5, "color": "blue"}, "after merge patch %r" % patched["spec"])
    check(patched["metadata"]["generation"] == 2, "generation %r" % patched["metadata"].get("generation"))
    status = co.patch_namespaced_custom_object_status(group, "v1", c.ns, plural, "t1", {"status": {"ready": True}})
    check(status.get("status") == {"ready": True}, "status %r" % status.get("status"))
    check(status["metadata"]["generation"] == 2, "a status patch changed generation")
    read_status = co.get_namespaced_custom_object_status(group, "v1", c.ns, plural, "t1")
    check(read_status.get("status") == {"ready": True}, "status read %r" % read_status.get("status"))
    current = co.get_namespaced_custom_object(group, "v1", c.ns, plural, "t1")
    current["spec"]["color"] = "red"
    current["status"] = {"ready": False}
    replaced = co.replace_namespaced_custom_object(group, "v1", c.ns, plural, "t1", current)
    check(replaced["spec"]["color"] == "red", "replace %r" % replaced["spec"])
    check(replaced.get("status") == {"ready": True}, "replacing the main resource changed status")
    bad = thing("bad", 1)
    bad["spec"]["size"] = "big"
    e = expect_api_error(422, co.create_namespaced_custom_object, group, "v1", c.ns, plural, bad)
    check("spec.size" in body_message(e), body_message(e))
    # Watch from a list's resourceVersion.
    rv = co.list_namespaced_custom_object(group, "v1", c.ns, plural)["metadata"]["resourceVersion"]
    co.create_namespaced_custom_object(group, "v1", c.ns, plural, thing("t2", 1))
    w = watch.Watch()
    events = []
    for ev in w.stream(
        co.list_namespaced_custom_object,
        group,
        "v1",
        c.ns,
        plural,
        resource_version=rv,
        timeout_seconds=10,
        _request_timeout=15,
    ):
        events.append((ev["type"], ev["object"]["metadata"]["name"]))
        w.stop()
    check(events == [("ADDED", "t2")], "watch %r" % events)
    for n in ("t1", "t2"):
        co.delete_namespaced_custom_object(group, "v1", c.ns, plural, n)
    expect_api_error(404, co.get_namespaced_custom_object, group, "v1", c.ns, plural, "t1")


@case("discovery")
def discovery(c):
    # These ask /api/, /apis/ and /version/, with the trailing slash.
    core = client.CoreApi(c.api).get_api_versions()
    check("v1" in core.versions, "/api/ versions: %r" % core.versions)
    groups = [g.name for g in client.ApisApi(c.api).get_api_versions().groups]
    check("apps" in groups, "/apis/ groups: %r" % groups)
    v = client.VersionApi(c.api).get_code()
    check(v.major == "1" and v.minor.startswith("32"), "/version/: %r" % v)


@case("kr8s-version")
def kr8s_version(c):
    import kr8s

    api = kr8s.api(kubeconfig=c.kubeconfig)
    v = api.version()
    check(v.get("major") == "1", "kr8s api.version(): %r" % v)
    names = [ns.name for ns in api.get("namespaces")]
    check(c.ns in names, "kr8s namespaces: %r" % names)


@case("dry-run-invalid")
def dry_run_invalid(c):
    body = configmap("py-dry-run")
    e = expect_api_error(
        422, c.core.create_namespaced_config_map, c.ns, body, dry_run="Bogus"
    )
    status = body_json(e)
    check(status["reason"] == "Invalid", "reason %r" % status["reason"])
    want = 'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Bogus"}: supported values: "All"'
    check(status["message"] == want, "message %r" % status["message"])
    c.core.create_namespaced_config_map(c.ns, body)
    e = expect_api_error(
        422, c.core.delete_namespaced_config_map, "py-dry-run", c.ns, dry_run="Nope"
    )
    check(body_message(e).startswith("DeleteOptions.meta.k8s.io"), body_message(e))
    c.core.read_namespaced_config_map("py-dry-run", c.ns)
    c.core.delete_namespaced_config_map("py-dry-run", c.ns)


@case("zero-values")
def zero_values(c):
    # Fields upstream always serializes come back even when nothing set them, and the
    # client's models read them (rs.status.replicas, not None).
    labels = {"app": "py-zero"}
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="c", image="busybox:1.36")],
            node_selector={"minik8s.io/no-such-node": "x"},
        ),
    )
    selector = client.V1LabelSelector(match_labels=labels)
    rs = client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name="py-zero"),
        spec=client.V1ReplicaSetSpec(replicas=0, selector=selector, template=template),
    )
    created = c.apps.create_namespaced_replica_set(c.ns, rs)
    check(created.status is not None and created.status.replicas == 0, "create: %r" % created.status)
    got = c.apps.read_namespaced_replica_set("py-zero", c.ns)
    check(got.status is not None and got.status.replicas == 0, "read: %r" % got.status)
    c.apps.delete_namespaced_replica_set("py-zero", c.ns)
    ds = client.V1DaemonSet(
        metadata=client.V1ObjectMeta(name="py-zero"),
        spec=client.V1DaemonSetSpec(selector=selector, template=template),
    )
    c.apps.create_namespaced_daemon_set(c.ns, ds)
    got = c.apps.read_namespaced_daemon_set("py-zero", c.ns).status
    check(
        got is not None and got.desired_number_scheduled == 0 and got.number_ready == 0,
        "daemonset status: %r" % got,
    )
    c.apps.delete_namespaced_daemon_set("py-zero", c.ns)
    svc = client.V1Service(
        metadata=client.V1ObjectMeta(name="py-zero"),
        spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)], selector=labels),
    )
    c.core.create_namespaced_service(c.ns, svc)
    got = c.core.read_namespaced_service("py-zero", c.ns)
    check(got.status is not None and got.status.load_balancer is not None, "service: %r" % got.status)
    c.core.delete_namespaced_service("py-zero", c.ns)


INCLUSTER_SCRIPT = """
import sys
from kubernetes import client, config, watch
config.load_incluster_config()
ns, cm = sys.argv[1], sys.argv[2]
v1 = client.CoreV1Api()
own = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
pods = [p.metadata.name for p in v1.list_namespaced_pod(ns).items]
print("namespace %s: pods %s" % (own, ",".join(pods)), flush=True)
print("watching", flush=True)
w = watch.Watch()
for ev in w.stream(v1.list_namespaced_config_map, ns, field_selector="metadata.name=" + cm,
                   timeout_seconds=60):
    if (ev["object"].data or {}).get("state") == "go":
        print("saw state=go", flush=True)
        sys.exit(0)
sys.exit("the watch ended")
"""


@case("in-cluster")
def in_cluster(c):
    # A pod runs this client (from this suite's venv, mounted read-only) with
    # load_incluster_config(): the token, CA and namespace mounted by ServiceAccount
    # admission, KUBERNETES_SERVICE_HOST/PORT.
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    check(sys.version_info[:2] == (3, 11), "the venv's Python %r is not the image's 3.11" % (sys.version_info[:2],))
    name, cm = "py-incluster", "py-incluster-watch"
    c.core.create_namespaced_config_map(c.ns, configmap(cm, {"state": "wait"}))
    # The pod's ServiceAccount may read the namespace, as one grants it on any RBAC cluster.
    binding = {
        "metadata": {"name": "py-incluster-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": c.ns}],
    }
    try:
        client.RbacAuthorizationV1Api(c.api).create_namespaced_role_binding(c.ns, binding)
    except ApiException as e:
        check(e.status == 409, "creating the role binding: %s" % one_line(e))
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=1,
            containers=[
                client.V1Container(
                    name="client",
                    image="python:3",
                    command=["python3", "-c", INCLUSTER_SCRIPT, c.ns, cm],
                    env=[client.V1EnvVar(name="PYTHONPATH", value="/opt/client")],
                    volume_mounts=[
                        client.V1VolumeMount(name="client", mount_path="/opt/client", read_only=True)
                    ],
                )
            ],
            volumes=[client.V1Volume(name="client", host_path=client.V1HostPathVolumeSource(path=site))],
        ),
    )
    created = c.core.create_namespaced_pod(c.ns, pod)
    check(created.spec.service_account_name == "default", "serviceAccountName %r" % created.spec.service_account_name)
    mounts = [m.mount_path for m in created.spec.containers[0].volume_mounts]
    check("/var/run/secrets/kubernetes.io/serviceaccount" in mounts, "mounts %r" % mounts)

    def log():
        try:
            return c.core.read_namespaced_pod_log(name, c.ns)
        except ApiException as e:
            return "(no log: %s)" % one_line(e)

    def watching():
        text = log()
        status = c.core.read_namespaced_pod(name, c.ns).status
        state = [s.state for s in status.container_statuses or []]
        check(
            "watching" in text or status.phase in ("Failed", "Succeeded"),
            "phase %s, container %r, log so far %r" % (status.phase, state, text),
        )
        return text

    # Starting Python and importing the client takes long on a loaded 2-core machine (the
    # whole conformance run shares it): CI once saw an empty log after 60 s.
    text = eventually(watching, "the client to watch", limit=180)
    check("watching" in text, "the client ended before watching: %r" % text)
    c.core.patch_namespaced_config_map(cm, c.ns, {"data": {"state": "go"}})

    def succeeded():
        phase = c.core.read_namespaced_pod(name, c.ns).status.phase
        check(phase == "Succeeded", "phase %s, log %r" % (phase, log()))

    eventually(succeeded, "the client to succeed", limit=30)
    text = log()
    check("saw state=go" in text, "log %r" % text)
    check(("namespace %s: pods" % c.ns) in text and name in text, "log %r" % text)
    c.core.delete_namespaced_pod(name, c.ns)
    c.core.delete_namespaced_config_map(cm, c.ns)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--tmp", default="/tmp")
    p.add_argument("--list", action="store_true")
    p.add_argument("cases", nargs="*")
    args = p.parse_args()
    if args.list:
        for name in CASES:
            print(name)
        return 0
    c = Ctx(args)
    for name in args.cases or list(CASES):
        fn = CASES.get(name)
        started = time.monotonic()
        if fn is None:
            print("CASE\t%s\tFAIL\tno such case in suite.py" % name, flush=True)
            continue
        try:
            fn(c)
            ms = int((time.monotonic() - started) * 1000)
            print("CASE\t%s\tok\t%d" % (name, ms), flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is a line
            where = ""
            for frame in reversed(traceback.extract_tb(e.__traceback__)):
                if frame.filename == __file__:
                    where = " [suite.py:%d]" % frame.lineno
                    break
            print("CASE\t%s\tFAIL\t%s%s" % (name, one_line(e), where), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
