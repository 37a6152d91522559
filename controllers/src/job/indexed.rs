//! Completion indexes of Indexed Jobs: the index a pod carries, and `status.completedIndexes`
//! in upstream's compressed form (`1,3-5,7`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// The index in the pod's annotation (upstream reads the annotation, not the label).
pub fn pod_index(pod: &Pod) -> Option<i32> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(COMPLETION_INDEX)?
        .parse()
        .ok()
        .filter(|i| *i >= 0)
}

/// Parses `1,3-5`; entries that do not parse are skipped, as upstream does.
pub fn parse(s: Option<&str>) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s.unwrap_or("").split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    out.insert(i);
                }
            }
        }
    }
    out
}

/// Formats indexes as intervals: `0-2,5`.
pub fn format(indexes: &BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(i32, i32)> = None;
    for &i in indexes {
        run = match run {
            Some((first, last)) if i == last + 1 => Some((first, i)),
            Some(r) => {
                parts.push(interval(r));
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some(r) = run {
        parts.push(interval(r));
    }
    parts.join(",")
}

fn interval((first, last): (i32, i32)) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_round_trip_as_intervals() {
        let set = parse(Some("1,3-5,7"));
        assert_eq!(set, BTreeSet::from([1, 3, 4, 5, 7]));
        assert_eq!(format(&set), "1,3-5,7");
        assert_eq!(format(&BTreeSet::from([0, 1, 2])), "0-2");
        assert_eq!(format(&BTreeSet::new()), "");
        assert!(parse(None).is_empty());
    }
}
