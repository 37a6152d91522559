use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use prost::Message as _;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::*;

/// JSON → protobuf → JSON, compared as the typed object.
fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(value: Json) -> Json {
    let bytes = encode(&value).unwrap();
    assert!(bytes.starts_with(MAGIC));
    let back = decode_enveloped(&bytes, "", "").unwrap();
    let a: T = serde_json::from_value(value.clone()).unwrap();
    let b: T = serde_json::from_value(back.clone()).unwrap();
    assert_eq!(a, b, "round trip changed the object: {back:#}");
    back
}

fn pod() -> Json {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web", "namespace": "default", "uid": "0b6a3f9e-1",
            "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"app": "web"}, "annotations": {"a": "b"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                 "uid": "u", "controller": true, "blockOwnerDeletion": false}],
            "finalizers": ["x/y"],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                               "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}],
        },
        "spec": {
            "containers": [{
                "name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"],
                "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}],
                "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": false}}}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m"}},
                "livenessProbe": {"httpGet": {"path": "/", "port": "http", "scheme": "HTTP"},
                                  "periodSeconds": 10, "failureThreshold": 3},
                "readinessProbe": {"tcpSocket": {"port": 80}, "initialDelaySeconds": 5},
                "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}],
            }],
            "volumes": [{"name": "data", "configMap": {"name": "cm", "defaultMode": 420,
                                                         "items": [{"key": "k", "path": "p"}]}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "automountServiceAccountToken": false,
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 0}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "securityContext": {"fsGroup": 2000, "supplementalGroups": [1, 2]},
        },
        "status": {
            "phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
            "startTime": "2024-05-01T10:00:01Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:00:02Z"}],
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 2, "image": "busybox:1.36",
                                   "imageID": "sha256:x", "started": true,
                                   "state": {"running": {"startedAt": "2024-05-01T10:00:01Z"}}}],
        },
    })
}

#[test]
fn pod_round_trip() {
    let back = round_trip::<Pod>(pod());
    // Zeros that are values (Go pointers) survive; the probe's handler stays inline.
    assert_eq!(
        back["spec"]["containers"][0]["securityContext"]["runAsUser"],
        0
    );
    assert_eq!(
        back["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(back["spec"]["tolerations"][0]["tolerationSeconds"], 0);
    assert_eq!(
        back["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"],
        "http"
    );
    assert_eq!(
        back["spec"]["containers"][0]["readinessProbe"]["tcpSocket"]["port"],
        80
    );
    assert_eq!(
        back["metadata"]["managedFields"][0]["fieldsV1"],
        pod()["metadata"]["managedFields"][0]["fieldsV1"]
    );
}

#[test]
fn deployment_round_trip_keeps_zero_replicas() {
    let d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "busybox", "image": "busybox:1.36",
                                                  "args": ["sleep", "3600"]}]}},
        },
        "status": {"observedGeneration": 1, "replicas": 2, "conditions": [
            {"type": "Available", "status": "True", "lastUpdateTime": "2024-05-01T10:00:00Z",
             "lastTransitionTime": "2024-05-01T10:00:00Z", "reason": "MinimumReplicasAvailable"}]},
    });
    let back = round_trip::<Deployment>(d);
    assert_eq!(back["spec"]["replicas"], 0);
    assert_eq!(
        back["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": "25%", "maxUnavailable": 1})
    );
}

#[test]
fn configmap_secret_namespace_service_round_trip() {
    round_trip::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"a": "b", "empty": ""}, "binaryData": {"bin": "AAEC"}, "immutable": false,
    }));
    let back = round_trip::<Secret>(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "type": "Opaque", "data": {"a": "Yg==", "nul": "AP8="},
    }));
    assert_eq!(back["data"]["a"], "Yg==");
    round_trip::<Namespace>(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"},
    }));
    let back = round_trip::<Service>(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
        "spec": {
            "type": "NodePort", "selector": {"app": "web"},
            "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP", "nodePort": 30080},
                      {"name": "metrics", "port": 9090, "targetPort": 9091, "protocol": "TCP"}],
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
        },
        "status": {"loadBalancer": {}},
    }));
    assert_eq!(back["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(back["spec"]["ports"][1]["targetPort"], 9091);
}

#[test]
fn api_service_round_trip() {
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    let back = round_trip::<APIService>(json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1beta1.metrics.k8s.io"},
        "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                 "groupPriorityMinimum": 100, "versionPriority": 100, "caBundle": "Y2VydA==",
                 "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443}},
        "status": {"conditions": [{"type": "Available", "status": "False",
                                   "reason": "MissingEndpoints",
                                   "lastTransitionTime": "2024-05-01T10:00:00Z"}]},
    }));
    assert_eq!(back["spec"]["caBundle"], "Y2VydA==");
    assert_eq!(back["spec"]["service"]["port"], 443);
    assert_eq!(
        back["status"]["conditions"][0]["reason"],
        "MissingEndpoints"
    );
}

#[test]
fn crd_schemas_round_trip() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let back = round_trip::<CustomResourceDefinition>(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                     "properties": {
                         "spec": {"type": "object", "required": ["size"], "additionalProperties": false,
                                  "properties": {"size": {"type": "integer", "minimum": 1, "maximum": 10.5,
                                                          "default": 3, "enum": [1, 3, "x"]},
                                                 "tags": {"type": "array", "items": {"type": "string"}}}},
                     }}}}]},
    }));
    let spec = &back["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    assert_eq!(spec["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(spec["properties"]["spec"]["additionalProperties"], false);
    assert_eq!(
        spec["properties"]["spec"]["properties"]["size"]["enum"],
        json!([1, 3, "x"])
    );
    assert_eq!(
        spec["properties"]["spec"]["properties"]["size"]["maximum"],
        10.5
    );
}

#[test]
fn lists_and_status() {
    let list = json!({"apiVersion": "v1", "kind": "ConfigMapList",
                      "metadata": {"resourceVersion": "7", "continue": "abc", "remainingItemCount": 0},
                      "items": [{"metadata": {"name": "a"}, "data": {"k": "v"}}, {"metadata": {"name": "b"}}]});
    let back = decode_enveloped(&encode(&list).unwrap(), "", "").unwrap();
    assert_eq!(back, list);
    let status = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                        "message": "nope", "reason": "NotFound", "code": 404,
                        "details": {"name": "x", "kind": "pods"}});
    let back = decode_enveloped(&encode(&status).unwrap(), "", "").unwrap();
    assert_eq!(back, status);
}

#[test]
fn envelope_errors_and_defaults() {
    assert_eq!(
        decode_enveloped(b"{}", "v1", "Pod").unwrap_err(),
        ProtoError::NoPrefix
    );
    let bytes = encode_as(&json!({"metadata": {"name": "a"}}), "", "").unwrap_err();
    assert!(matches!(bytes, ProtoError::Unsupported { .. }));
    // An envelope without type information takes the defaults.
    let raw = encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}))
        .unwrap();
    let env = parse_envelope(&raw).unwrap();
    let mut bare = MAGIC.to_vec();
    wire::put_bytes(&mut bare, 2, env.raw);
    let v = decode_enveloped(&bare, "v1", "ConfigMap").unwrap();
    assert_eq!(v["metadata"]["name"], "a");
    assert_eq!(v["kind"], "ConfigMap");
    assert_eq!(
        decode_enveloped(&bare, "", "").unwrap_err(),
        ProtoError::MissingKind
    );
    assert!(!supports("example.com/v1", "Widget"));
    assert!(!supports("policy.example.com/v1", "PodDisruptionBudget"));
    assert!(!supports("example.com/v1", "Status"));
    assert!(supports("apps/v1", "DeploymentList"));
    assert!(supports("v1", "Status"));
    assert!(supports(
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview"
    ));
    // Truncated data is an error, not a panic.
    assert!(decode_enveloped(&raw[..raw.len() - 3], "", "").is_err());
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    // JSONSchemaProps.not (field 28) inside itself, 10 000 deep, inside a CRD's schema.
    let mut schema_props = Vec::new();
    for _ in 0..10_000 {
        let mut outer = Vec::new();
        wire::put_bytes(&mut outer, 28, &schema_props);
        schema_props = outer;
    }
    let mut validation = Vec::new();
    wire::put_bytes(&mut validation, 1, &schema_props);
    let mut version = Vec::new();
    wire::put_bytes(&mut version, 4, &validation);
    let mut spec = Vec::new();
    wire::put_bytes(&mut spec, 7, &version);
    let mut crd = Vec::new();
    wire::put_bytes(&mut crd, 2, &spec);
    let mut body = MAGIC.to_vec();
    wire::put_bytes(&mut body, 2, &crd);
    let e =
        decode_enveloped(&body, "apiextensions.k8s.io/v1", "CustomResourceDefinition").unwrap_err();
    assert!(e.to_string().contains("nest more than"), "{e}");
}

#[test]
fn watch_frames() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "5"}});
    let mut stream = watch_frame("ADDED", &cm).unwrap();
    stream.extend(watch_frame("DELETED", &cm).unwrap());
    let len = u32::from_be_bytes(stream[..4].try_into().unwrap()) as usize;
    // A bare WatchEvent, not enveloped: field 1 (type) comes first.
    assert_eq!(stream[4], 0x0a);
    assert!(!stream[4..].starts_with(MAGIC));
    let (events, rest) = decode_watch_frames(&stream[..stream.len() - 1]).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(rest.len(), stream.len() - 1 - (4 + len));
    let (events, rest) = decode_watch_frames(&stream).unwrap();
    assert!(rest.is_empty());
    assert_eq!(events[0], ("ADDED".to_string(), cm.clone()));
    assert_eq!(events[1].0, "DELETED");
}

/// What a Go client sends: every value field written, zeros included (gogo-protobuf writes
/// non-pointer fields always). Built here with k8s-pb's prost types, an independent encoder.
#[test]
fn decodes_what_go_clients_send() {
    use k8s_pb::api::apps::v1 as apps;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    let s = |v: &str| Some(v.to_string());
    let empty_meta = || meta::ObjectMeta {
        name: s(""),
        generate_name: s(""),
        namespace: s(""),
        self_link: s(""),
        uid: s(""),
        resource_version: s(""),
        generation: Some(0),
        creation_timestamp: Some(meta::Time::default()),
        ..Default::default()
    };
    let deployment = apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: s("web"),
            labels: [("app".to_string(), "web".to_string())].into(),
            ..empty_meta()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: [("app".to_string(), "web".to_string())].into(),
                ..Default::default()
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta {
                    labels: [("app".to_string(), "web".to_string())].into(),
                    ..empty_meta()
                }),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: s("busybox"),
                        image: s("busybox:1.36"),
                        command: vec!["sleep".into(), "3600".into()],
                        resources: Some(core::ResourceRequirements::default()),
                        termination_message_path: s(""),
                        image_pull_policy: s(""),
                        stdin: Some(false),
                        tty: Some(false),
                        ..Default::default()
                    }],
                    restart_policy: s(""),
                    dns_policy: s(""),
                    host_network: Some(false),
                    scheduler_name: s(""),
                    ..Default::default()
                }),
            }),
            strategy: Some(apps::DeploymentStrategy {
                r#type: s(""),
                rolling_update: None,
            }),
            min_ready_seconds: Some(0),
            paused: Some(false),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus {
            observed_generation: Some(0),
            replicas: Some(0),
            ..Default::default()
        }),
    };
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: s("apps/v1"),
            kind: s("Deployment"),
        }),
        raw: Some(deployment.encode_to_vec()),
        content_encoding: s(""),
        content_type: s(""),
    };
    let mut body = MAGIC.to_vec();
    body.extend(unknown.encode_to_vec());
    let v = decode_enveloped(&body, "", "").unwrap();
    assert_eq!(
        v,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "busybox", "image": "busybox:1.36",
                                             "command": ["sleep", "3600"], "resources": {}}]},
                },
                "strategy": {},
            },
            "status": {},
        })
    );
    // And what we write, prost decodes to the same object.
    let ours = encode(&v).unwrap();
    let env = parse_envelope(&ours).unwrap();
    let decoded = apps::Deployment::decode(env.raw).unwrap();
    let spec = decoded.spec.unwrap();
    assert_eq!(spec.replicas, Some(0));
    assert_eq!(
        spec.template.unwrap().spec.unwrap().containers[0].image,
        s("busybox:1.36")
    );
}

#[test]
fn writes_what_go_clients_read() {
    use k8s_pb::api::core::v1 as core;
    let bytes = encode(&pod()).unwrap();
    let env = parse_envelope(&bytes).unwrap();
    assert_eq!((env.api_version.as_str(), env.kind.as_str()), ("v1", "Pod"));
    let p = core::Pod::decode(env.raw).unwrap();
    let meta = p.metadata.unwrap();
    assert_eq!(meta.creation_timestamp.unwrap().seconds, Some(1714557600));
    let spec = p.spec.unwrap();
    let c = &spec.containers[0];
    let port = c
        .liveness_probe
        .as_ref()
        .unwrap()
        .handler
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap()
        .port
        .as_ref()
        .unwrap();
    assert_eq!(
        (port.r#type, port.str_val.as_deref()),
        (Some(1), Some("http"))
    );
    assert_eq!(
        c.resources.as_ref().unwrap().limits["memory"]
            .string
            .as_deref(),
        Some("128Mi")
    );
    assert_eq!(
        spec.volumes[0]
            .volume_source
            .as_ref()
            .unwrap()
            .config_map
            .as_ref()
            .unwrap()
            .local_object_reference
            .as_ref()
            .unwrap()
            .name
            .as_deref(),
        Some("cm")
    );
    assert_eq!(
        spec.security_context.unwrap().supplemental_groups,
        vec![1, 2]
    );
}

/// Not a benchmark harness, just numbers: `cargo test -p minik8s-apiserver --release
/// protobuf::tests::speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn speed() {
    let p = pod();
    let bytes = encode(&p).unwrap();
    let n = 20_000;
    let start = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(encode(&p).unwrap());
    }
    let enc = start.elapsed() / n;
    let start = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(decode_enveloped(&bytes, "", "").unwrap());
    }
    let dec = start.elapsed() / n;
    let start = std::time::Instant::now();
    let typed: Pod = serde_json::from_value(p.clone()).unwrap();
    for _ in 0..n {
        std::hint::black_box(serde_json::to_vec(&typed).unwrap());
    }
    let json = start.elapsed() / n;
    println!(
        "pod: {} protobuf bytes, {} JSON bytes; encode {enc:?}, decode {dec:?}; serde_json::to_vec of the typed pod {json:?}",
        bytes.len(),
        serde_json::to_vec(&p).unwrap().len()
    );
}

#[test]
fn every_built_in_kind_has_a_message() {
    for r in minik8s_api::registry::built_in() {
        let v = r.api_version();
        assert!(supports(&v, &r.kind), "{v} {}", r.kind);
        assert!(supports(&v, &r.list_kind), "{v} {}", r.list_kind);
        for sub in &r.subresources {
            let sv = if sub.group.is_empty() {
                sub.version.clone()
            } else {
                format!("{}/{}", sub.group, sub.version)
            };
            assert!(supports(&sv, &sub.kind), "{sv} {}", sub.kind);
        }
    }
    for kind in ["DeleteOptions", "Status", "WatchEvent"] {
        assert!(
            supports("apps/v1", kind) && supports("autoscaling/v2", kind),
            "{kind}"
        );
    }
}
