use serde_json::{Value, json};

use super::*;

fn schema() -> Schema {
    let defs = json!({
        "Deployment": {"type": "object", "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"allOf": [{"$ref": "#/components/schemas/Meta"}]},
            "spec": {"allOf": [{"$ref": "#/components/schemas/Spec"}]},
            "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
        }},
        "Meta": {"type": "object", "properties": {
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "uid": {"type": "string"},
            "resourceVersion": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "managedFields": {"type": "array", "items": {"type": "object"},
                "x-kubernetes-list-type": "atomic"},
        }},
        "Spec": {"type": "object", "properties": {
            "replicas": {"type": "integer"},
            "paused": {"type": "boolean"},
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                "additionalProperties": {"type": "string"}},
            "containers": {"type": "array", "items": {"$ref": "#/components/schemas/C"},
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        }},
        "C": {"type": "object", "properties": {
            "name": {"type": "string"}, "image": {"type": "string"},
            "args": {"type": "array", "items": {"type": "string"}},
        }},
    });
    Schema::from_definitions(defs.as_object().unwrap(), "Deployment")
}

fn fm<'a>(schema: &'a Schema, now: &str) -> FieldManager<'a> {
    FieldManager {
        schema,
        api_version: "apps/v1",
        kind: "Deployment",
        subresource: "",
        reset: Set::from_paths([[PathElement::field("status")].as_slice()]),
        now: now.into(),
    }
}

fn entries(obj: &Value) -> Vec<Value> {
    obj["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn stored(mut obj: Value) -> Value {
    obj["metadata"]["uid"] = "u1".into();
    obj
}

#[test]
fn update_records_changed_fields() {
    let s = schema();
    let mut created = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "selector": {"app": "web"},
            "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"replicas": 0},
    });
    fm(&s, "2024-01-01T00:00:00Z").update(None, &mut created, "kubectl-create");
    assert_eq!(
        entries(&created),
        vec![json!({
            "manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
            "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {".": {}, "f:replicas": {}, "f:selector": {},
                    "f:containers": {".": {}, "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}},
            },
        })]
    );
    // Another manager changes the image: it takes the field; the first keeps the rest.
    let live = stored(created);
    let mut updated = live.clone();
    updated["spec"]["containers"][0]["image"] = "nginx:2".into();
    fm(&s, "2024-01-01T00:01:00Z").update(Some(&live), &mut updated, "kubectl-set");
    let e = entries(&updated);
    assert_eq!(e.len(), 2);
    assert_eq!(e[1]["manager"], "kubectl-set");
    assert_eq!(
        e[1]["fieldsV1"],
        json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {"f:image": {}}}}})
    );
    assert!(
        e[0]["fieldsV1"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]
            .get("f:image")
            .is_none()
    );
    // A no-op update changes nothing, not even times.
    let live = stored(updated);
    let mut same = live.clone();
    fm(&s, "2024-01-01T00:02:00Z").update(Some(&live), &mut same, "kubectl-edit");
    assert_eq!(same, live);
}

#[test]
fn untracked_objects_stay_untracked_and_reset_clears() {
    let s = schema();
    let live = stored(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 1}}));
    let mut new = live.clone();
    new["spec"]["replicas"] = 2.into();
    fm(&s, "t").update(Some(&live), &mut new, "x");
    assert!(new["metadata"].get("managedFields").is_none());

    let mut created = live.clone();
    fm(&s, "2024-01-01T00:00:00Z").update(None, &mut created, "a");
    let live = stored(created);
    let mut cleared = live.clone();
    cleared["metadata"]["managedFields"] = json!([]);
    cleared["spec"]["replicas"] = 3.into();
    fm(&s, "t").update(Some(&live), &mut cleared, "b");
    assert!(cleared["metadata"].get("managedFields").is_none());
}

fn apply(
    s: &Schema,
    live: Option<&Value>,
    config: Value,
    manager: &str,
    force: bool,
) -> Result<Value, ApplyError> {
    fm(s, "2024-01-01T00:00:00Z").apply(live, &config, manager, force)
}

fn config(replicas: i64, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "containers": [{"name": "c", "image": image}]}})
}

#[test]
fn apply_creates_and_conflicts() {
    let s = schema();
    let created = apply(&s, None, config(1, "nginx"), "kubectl", false).unwrap();
    assert_eq!(
        entries(&created),
        vec![json!({
            "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
            "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:replicas": {},
                    "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}},
            },
        })]
    );
    let live = stored(created);
    // Same values from another applier: shared ownership, no conflict.
    let shared = apply(&s, Some(&live), config(1, "nginx"), "other", false).unwrap();
    assert_eq!(entries(&shared).len(), 2);
    // A different value conflicts, naming the field and the manager.
    let err = apply(&s, Some(&live), config(3, "nginx"), "other", false).unwrap_err();
    let ApplyError::Conflicts(conflicts) = &err else {
        panic!("{err:?}")
    };
    let (message, causes) = conflict_message(conflicts);
    assert_eq!(
        message,
        "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
    );
    assert_eq!(
        causes,
        vec![(
            "conflict with \"kubectl\"".to_string(),
            ".spec.replicas".to_string()
        )]
    );
    let err = apply(&s, Some(&live), config(3, "apache"), "other", false).unwrap_err();
    let ApplyError::Conflicts(conflicts) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        conflict_message(conflicts).0,
        "Apply failed with 2 conflicts: conflicts with \"kubectl\":\n- .spec.replicas\n- .spec.containers[name=\"c\"].image"
    );
    // Forced: the field moves to the new applier.
    let forced = apply(&s, Some(&live), config(3, "nginx"), "other", true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 3);
    let e = entries(&forced);
    let kubectl = e.iter().find(|e| e["manager"] == "kubectl").unwrap();
    assert!(kubectl["fieldsV1"]["f:spec"].get("f:replicas").is_none());
    let other = e.iter().find(|e| e["manager"] == "other").unwrap();
    assert!(other["fieldsV1"]["f:spec"].get("f:replicas").is_some());
}

#[test]
fn apply_removes_fields_it_no_longer_applies() {
    let s = schema();
    let mut first = config(1, "nginx");
    first["spec"]["paused"] = true.into();
    first["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar", "image": "busybox"}));
    let live = stored(apply(&s, None, first, "kubectl", false).unwrap());
    // An updater takes the replicas.
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = 5.into();
    fm(&s, "2024-01-01T00:01:00Z").update(Some(&live), &mut scaled, "kubectl-scale");
    let live = stored(scaled);
    // The next apply drops paused, the sidecar and replicas: paused and the sidecar go;
    // replicas stays, the updater owns it now.
    let mut next = config(1, "nginx");
    next["spec"].as_object_mut().unwrap().remove("replicas");
    let out = apply(&s, Some(&live), next, "kubectl", false).unwrap();
    assert_eq!(out["spec"].get("paused"), None);
    assert_eq!(out["spec"]["replicas"], 5);
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "c", "image": "nginx"}])
    );
    // Applying the same again changes nothing.
    let live = stored(out);
    let mut again = config(1, "nginx");
    again["spec"].as_object_mut().unwrap().remove("replicas");
    let out = fm(&s, "2030-01-01T00:00:00Z")
        .apply(Some(&live), &again, "kubectl", false)
        .unwrap();
    assert_eq!(out, live);
}

#[test]
fn apply_errors() {
    let s = schema();
    let mut wrong = config(1, "x");
    wrong["apiVersion"] = "apps/v2".into();
    assert_eq!(
        apply(&s, None, wrong, "m", false),
        Err(ApplyError::BadRequest(
            "invalid object type: apps/v2, Kind=Deployment".into()
        ))
    );
    let mut unknown = config(1, "x");
    unknown["spec"]["bogus"] = 1.into();
    assert_eq!(
        apply(&s, None, unknown, "m", false),
        Err(ApplyError::Internal(
            "failed to create typed patch object (/web; apps/v1, Kind=Deployment): .spec.bogus: field not declared in schema".into()
        ))
    );
    let mut with_mf = config(1, "x");
    with_mf["metadata"]["managedFields"] = json!([]);
    assert_eq!(
        apply(&s, None, with_mf, "m", false),
        Err(ApplyError::BadRequest(
            "metadata.managedFields must be nil".into()
        ))
    );
}

#[test]
fn client_side_apply_upgrades_to_server_side() {
    let s = schema();
    let mut created = config(1, "nginx");
    created["metadata"]["annotations"] = json!({
        LAST_APPLIED: serde_json::to_string(&config(1, "nginx")).unwrap()
    });
    fm(&s, "2024-01-01T00:00:00Z").update(None, &mut created, "kubectl-client-side-apply");
    let live = stored(created);
    // kubectl may take over fields the annotation claims; others may not.
    let out = apply(&s, Some(&live), config(2, "nginx"), "kubectl", false).unwrap();
    assert_eq!(out["spec"]["replicas"], 2);
    let annotation = out["metadata"]["annotations"][LAST_APPLIED]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(annotation).unwrap(),
        config(2, "nginx")
    );
    let err = apply(&s, Some(&live), config(2, "nginx"), "helm", false).unwrap_err();
    assert_eq!(
        conflict_message(match &err {
            ApplyError::Conflicts(c) => c,
            _ => panic!("{err:?}"),
        })
        .0,
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.replicas"
    );
}

#[test]
fn update_managers_are_capped() {
    let s = schema();
    let mut obj = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {}}});
    fm(&s, "2024-01-01T00:00:00Z").update(None, &mut obj, "creator");
    for i in 0..12 {
        let live = stored(obj.clone());
        let mut new = live.clone();
        new["metadata"]["labels"][format!("l{i}")] = "x".into();
        fm(&s, &format!("2024-01-01T00:{:02}:00Z", i + 1)).update(
            Some(&live),
            &mut new,
            &format!("m{i}"),
        );
        obj = new;
    }
    let e = entries(&obj);
    assert_eq!(e.len(), MAX_UPDATE_MANAGERS);
    assert!(e.iter().any(|e| e["manager"] == "ancient-changes"));
}

#[test]
fn timestamps_alone_are_no_change() {
    let old = json!({"metadata": {"resourceVersion": "5", "managedFields": [
        {"manager": "a", "time": "2024-01-01T00:00:00Z", "fieldsV1": {}}]}, "spec": {"x": 1}});
    let mut new = json!({"metadata": {"managedFields": [
        {"manager": "a", "time": "2025-01-01T00:00:00Z", "fieldsV1": {}}]}, "spec": {"x": 1}});
    keep_unchanged_timestamps(&old, &mut new);
    assert_eq!(
        new["metadata"]["managedFields"][0]["time"],
        "2024-01-01T00:00:00Z"
    );
    let mut changed = json!({"metadata": {"managedFields": [
        {"manager": "a", "time": "2025-01-01T00:00:00Z", "fieldsV1": {}}]}, "spec": {"x": 2}});
    keep_unchanged_timestamps(&old, &mut changed);
    assert_eq!(
        changed["metadata"]["managedFields"][0]["time"],
        "2025-01-01T00:00:00Z"
    );
}
