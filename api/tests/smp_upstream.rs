//! Strategic merge patch against upstream's own expectations: the raw test cases of
//! `k8s.io/apimachinery/pkg/util/strategicpatch` (`strategicMergePatchRawTestCases`, as data
//! in `data/smp-upstream-cases.json`). Each case applies its two-way patch to `Original` and
//! its three-way patch (what `kubectl apply` sends) to `Current`; results must match exactly,
//! list order included.

use minik8s_api::patch::schema::Schema;
use minik8s_api::patch::strategic;
use serde_json::{Value, json};

/// Upstream's test type `MergeItem`, its struct tags as OpenAPI extensions.
fn merge_item_schema() -> Schema {
    let item = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    let merging = |items: Value| {
        json!({"type": "array", "items": items,
            "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"})
    };
    let defs = json!({
        "mergeItem": {"type": "object", "properties": {
            "name": {"type": "string"}, "value": {"type": "string"}, "other": {"type": "string"},
            "mergingList": merging(item("mergeItem")),
            "nonMergingList": {"type": "array", "items": item("mergeItem")},
            "mergingIntList": {"type": "array", "items": {"type": "integer"},
                "x-kubernetes-patch-strategy": "merge"},
            "nonMergingIntList": {"type": "array", "items": {"type": "integer"}},
            "mergeItemPtr": {"allOf": [item("mergeItem")],
                "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
            "simpleMap": {"type": "object", "additionalProperties": {"type": "string"}},
            "replacingItem": {"x-kubernetes-patch-strategy": "replace"},
            "retainKeysMap": {"allOf": [item("retainKeysMergeItem")],
                "x-kubernetes-patch-strategy": "retainKeys"},
            "retainKeysMergingList": {"type": "array", "items": item("mergeItem"),
                "x-kubernetes-patch-strategy": "merge,retainKeys",
                "x-kubernetes-patch-merge-key": "name"},
        }},
        "retainKeysMergeItem": {"type": "object", "properties": {
            "name": {"type": "string"}, "value": {"type": "string"}, "other": {"type": "string"},
            "simpleMap": {"type": "object", "additionalProperties": {"type": "string"}},
            "mergingIntList": {"type": "array", "items": {"type": "integer"},
                "x-kubernetes-patch-strategy": "merge"},
            "mergingList": merging(item("mergeItem")),
            "nonMergingList": {"type": "array", "items": item("mergeItem")},
        }},
    });
    Schema::from_definitions(defs.as_object().unwrap(), "mergeItem")
}

fn doc(v: Option<&Value>) -> Value {
    match v {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => json!({}),
    }
}

#[test]
fn upstream_raw_test_cases() {
    let schema = merge_item_schema();
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("data/smp-upstream-cases.json")).unwrap();
    assert!(cases.len() > 80);
    let mut failures = Vec::new();
    for c in &cases {
        let desc = c["description"].as_str().unwrap();
        let expected_error = c.get("ExpectedError").and_then(Value::as_str);
        let runs = [
            (
                "two-way",
                "Original",
                "TwoWay",
                c.get("TwoWayResult").or(c.get("Modified")),
            ),
            ("three-way", "Current", "ThreeWay", c.get("Result")),
        ];
        for (which, original, patch, expected) in runs {
            let result = strategic::apply(&schema, doc(c.get(original)), doc(c.get(patch)));
            match (result, expected_error) {
                (Err(e), Some(want)) if e.to_string().contains(want) => {}
                (Ok(got), None) if Some(&got) == expected.map(|e| doc(Some(e))).as_ref() => {}
                (got, _) => failures.push(format!(
                    "{desc} ({which}): got {got:?}, expected {}",
                    expected_error
                        .map(str::to_string)
                        .unwrap_or_else(|| doc(expected).to_string())
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs differ from upstream:\n{}",
        failures.len(),
        cases.len() * 2,
        failures.join("\n")
    );
}
