//! Discovery against Kubernetes 1.32's own list of built-in resources: every resource served
//! at a GA version is listed as upstream lists it (kind, scope, short names, verbs,
//! categories), and what is not served yet is named here, so serving a kind updates this list
//! and a kind that stops being served fails the test.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use testkit::{Backend, InProcess};

const UPSTREAM: &str = include_str!("../data/api-resources-1.32.txt");

/// Upstream's resources this server does not serve yet.
const NOT_SERVED: &[&str] = &[];

/// One line of the fixture, or of what the server lists, in the fixture's form.
fn line(gv: &str, r: &Value) -> String {
    let words = |key: &str| match r[key].as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|v| v.as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".to_string(),
    };
    let mut verbs: Vec<&str> = r["verbs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    verbs.sort();
    format!(
        "{gv} {} {} {} {} {} {}",
        r["name"].as_str().unwrap_or_default(),
        r["kind"].as_str().unwrap_or_default(),
        r["namespaced"],
        words("shortNames"),
        verbs.join(","),
        words("categories"),
    )
}

#[tokio::test]
async fn built_in_resources_are_listed_as_upstream_lists_them() {
    let server = InProcess::start(Backend::Sqlite).await.unwrap();
    let upstream: Vec<&str> = UPSTREAM
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    let mut served: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for gv in upstream
        .iter()
        .map(|l| l.split(' ').next().unwrap())
        .collect::<BTreeSet<_>>()
    {
        let path = match gv {
            "v1" => "/api/v1".to_string(),
            _ => format!("/apis/{gv}"),
        };
        let reply = server.get(&path).await;
        let resources = match reply.status.as_u16() {
            200 => reply.json()["resources"].as_array().cloned().unwrap(),
            404 => Vec::new(),
            other => panic!("{path}: {other}"),
        };
        let lines = resources
            .iter()
            .filter(|r| !r["name"].as_str().unwrap().contains('/'))
            .map(|r| (r["name"].as_str().unwrap().to_string(), line(gv, r)))
            .collect();
        served.insert(gv.to_string(), lines);
    }
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for want in &upstream {
        let mut words = want.split(' ');
        let (gv, name) = (words.next().unwrap(), words.next().unwrap());
        match served[gv].get(name) {
            None => missing.push(format!("{gv}/{name}")),
            Some(got) if got != want => wrong.push(format!("upstream: {want}\nserved:   {got}")),
            Some(_) => {}
        }
    }
    assert!(
        wrong.is_empty(),
        "listed unlike upstream:\n{}",
        wrong.join("\n")
    );
    assert_eq!(missing, NOT_SERVED, "resources not served");
    // Nothing at these versions that upstream does not have.
    let known: BTreeSet<String> = upstream
        .iter()
        .map(|l| {
            let mut w = l.split(' ');
            format!("{}/{}", w.next().unwrap(), w.next().unwrap())
        })
        .collect();
    for (gv, lines) in &served {
        for name in lines.keys() {
            assert!(
                known.contains(&format!("{gv}/{name}")),
                "{gv}/{name} is not upstream's"
            );
        }
    }
}
