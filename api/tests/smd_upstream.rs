//! Server-side apply's merge against structured-merge-diff's own expectations: the cases of
//! its `typed/merge_test.go` (`mergeCases`, as data in `data/smd-merge-cases.json`): a live
//! object, an applied configuration, and the merged result, list order included.

use minik8s_api::patch::schema::Schema;
use minik8s_api::patch::typed::{Typed, values_equal};
use serde_json::Value;

#[test]
fn upstream_merge_cases() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("data/smd-merge-cases.json")).unwrap();
    let mut failures = Vec::new();
    let mut runs = 0;
    for c in &cases {
        let schema = Schema::from_smd(&c["schema"], c["root"].as_str().unwrap());
        let typed = Typed::new(&schema);
        for t in c["triplets"].as_array().unwrap() {
            runs += 1;
            let got = typed.merge(&t[0], &t[1]);
            if !values_equal(&got, &t[2]) {
                failures.push(format!(
                    "{}: {} + {} = {got}, expected {}",
                    c["name"], t[0], t[1], t[2]
                ));
            }
        }
    }
    assert!(runs > 50);
    assert!(
        failures.is_empty(),
        "{} of {runs} merges differ from upstream:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
