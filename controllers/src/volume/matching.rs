//! Which volume a claim gets, as upstream's `FindMatchingVolume` and the binder's index of
//! volumes by access modes decide it: a volume pre-bound to the claim first, else among the
//! volumes whose access modes include the claim's, the group with the fewest modes, and in it
//! the smallest Available volume of the claim's class, volume mode and selector that holds the
//! request. Pure functions, so the rules are tested without a server.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use minik8s_api::quantity::Quantity;
use minik8s_api::selector::{Selector, SelectorError};
use minik8s_api::volume;

/// Upstream's `IsVolumeBoundToClaim`: the volume's claimRef names the claim, and its UID
/// when the claimRef has one.
pub fn is_bound_to(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    r.name == claim.metadata.name
        && r.namespace == claim.metadata.namespace
        && r.uid
            .as_deref()
            .is_none_or(|uid| uid.is_empty() || Some(uid) == claim.metadata.uid.as_deref())
}

fn mode_of(mode: Option<&String>) -> &str {
    mode.map_or("Filesystem", String::as_str)
}

/// Upstream's `CheckVolumeModeMismatches` (an unset mode is Filesystem).
pub fn volume_mode_mismatch(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let claim_mode = mode_of(claim.spec.as_ref().and_then(|s| s.volume_mode.as_ref()));
    let volume_mode = mode_of(volume.spec.as_ref().and_then(|s| s.volume_mode.as_ref()));
    claim_mode != volume_mode
}

fn claim_modes(claim: &PersistentVolumeClaim) -> BTreeSet<&str> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_ref())
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

fn volume_modes(volume: &PersistentVolume) -> BTreeSet<&str> {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_ref())
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

/// Upstream's `CheckAccessModes`: the volume offers every mode the claim asks for.
pub fn access_modes_fit(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    claim_modes(claim).is_subset(&volume_modes(volume))
}

fn capacity(volume: &PersistentVolume) -> Quantity {
    volume::volume_capacity(volume).unwrap_or_else(zero)
}

fn request(claim: &PersistentVolumeClaim) -> Quantity {
    volume::claim_request(claim).unwrap_or_else(zero)
}

fn zero() -> Quantity {
    Quantity::parse("0").expect("zero")
}

fn phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Upstream's `FindMatchingVolume` over one group of volumes, without a node (the binder's
/// path): a volume pre-bound to the claim wins at once; with delayed binding nothing else
/// is matched (the scheduler binds those); else the smallest fitting Available volume.
fn matching_in<'a>(
    claim: &PersistentVolumeClaim,
    volumes: &[&'a PersistentVolume],
    selector: Option<&Selector>,
    delay_binding: bool,
) -> Option<&'a PersistentVolume> {
    let requested = request(claim);
    let class = volume::claim_class(claim);
    let mut smallest: Option<(&PersistentVolume, Quantity)> = None;
    for &v in volumes {
        let claimed = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some();
        if claimed && !is_bound_to(v, claim) {
            continue;
        }
        let size = capacity(v);
        if volume::cmp_size(&size, &requested).is_lt() {
            continue;
        }
        if volume_mode_mismatch(claim, v) || v.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if is_bound_to(v, claim) {
            return Some(v);
        }
        if delay_binding {
            continue;
        }
        if phase(v) != "Available" {
            continue;
        }
        if selector.is_some_and(|s| !s.matches(v.metadata.labels.as_ref())) {
            continue;
        }
        if volume::volume_class(v) != class {
            continue;
        }
        if claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_attributes_class_name.as_deref())
            != v.spec
                .as_ref()
                .and_then(|s| s.volume_attributes_class_name.as_deref())
        {
            continue;
        }
        if smallest
            .as_ref()
            .is_none_or(|(_, q)| volume::cmp_size(q, &size).is_gt())
        {
            smallest = Some((v, size));
        }
    }
    smallest.map(|(v, _)| v)
}

/// The binder's `findBestMatchForClaim`: volumes grouped by their set of access modes; the
/// groups that offer all the claim's modes are searched fewest modes first, and the first
/// group with a match decides.
pub fn best_match<'a>(
    claim: &PersistentVolumeClaim,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    delay_binding: bool,
) -> Result<Option<&'a PersistentVolume>, SelectorError> {
    let selector = match claim.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        Some(s) => Some(Selector::from_label_selector(Some(s))?),
        None => None,
    };
    let wanted = claim_modes(claim);
    let mut groups: Vec<(BTreeSet<&str>, Vec<&PersistentVolume>)> = Vec::new();
    for v in volumes {
        let modes = volume_modes(v);
        if !wanted.is_subset(&modes) {
            continue;
        }
        match groups.iter_mut().find(|(m, _)| *m == modes) {
            Some((_, group)) => group.push(v),
            None => groups.push((modes, vec![v])),
        }
    }
    groups.sort_by_key(|(modes, _)| modes.len());
    Ok(groups
        .iter()
        .find_map(|(_, group)| matching_in(claim, group, selector.as_ref(), delay_binding)))
}

/// Upstream's `checkVolumeSatisfyClaim`, for a claim that names its volume; the error is
/// the reason the `VolumeMismatch` event gives.
pub fn satisfies(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> Result<(), String> {
    let name = volume.metadata.name.as_deref().unwrap_or_default();
    if volume.metadata.deletion_timestamp.is_some() {
        return Err(format!("the volume is marked for deletion {name:?}"));
    }
    if capacity(volume).value() < request(claim).value() {
        return Err("requested PV is too small".into());
    }
    if volume::volume_class(volume) != volume::claim_class(claim) {
        return Err("storageClassName does not match".into());
    }
    if volume_mode_mismatch(claim, volume) {
        return Err("incompatible volumeMode".into());
    }
    if !access_modes_fit(claim, volume) {
        return Err("incompatible accessMode".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pv(name: &str, size: &str, modes: &[&str], extra: Value) -> PersistentVolume {
        let mut v = json!({"metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": modes,
                     "hostPath": {"path": "/tmp/x"}},
            "status": {"phase": "Available"}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn pvc(size: &str, modes: &[&str], extra: Value) -> PersistentVolumeClaim {
        let mut c = json!({"metadata": {"name": "data", "namespace": "default", "uid": "u1"},
            "spec": {"accessModes": modes, "resources": {"requests": {"storage": size}}}});
        merge(&mut c, extra);
        serde_json::from_value(c).unwrap()
    }

    fn merge(into: &mut Value, extra: Value) {
        if let (Value::Object(a), Value::Object(b)) = (into, extra) {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing @ Value::Object(_)) if v.is_object() => merge(existing, v),
                    _ => {
                        a.insert(k, v);
                    }
                }
            }
        }
    }

    fn name(v: Option<&PersistentVolume>) -> Option<&str> {
        v.and_then(|v| v.metadata.name.as_deref())
    }

    const RWO: &[&str] = &["ReadWriteOnce"];

    #[test]
    fn the_smallest_volume_that_fits_wins() {
        let volumes = [
            pv("big", "10Gi", RWO, json!({})),
            pv("small", "1Gi", RWO, json!({})),
            pv("fits", "2Gi", RWO, json!({})),
            pv("exact", "2048Mi", RWO, json!({})),
        ];
        let claim = pvc("1500Mi", RWO, json!({}));
        let got = best_match(&claim, &volumes, false).unwrap();
        assert!(matches!(name(got), Some("fits" | "exact")));
        let too_big = pvc("20Gi", RWO, json!({}));
        assert_eq!(name(best_match(&too_big, &volumes, false).unwrap()), None);
    }

    #[test]
    fn class_selector_and_volume_mode_must_agree() {
        let volumes = [
            pv(
                "fast",
                "1Gi",
                RWO,
                json!({"spec": {"storageClassName": "fast"}}),
            ),
            pv(
                "labelled",
                "5Gi",
                RWO,
                json!({"metadata": {"labels": {"tier": "gold"}}}),
            ),
            pv(
                "block",
                "1Gi",
                RWO,
                json!({"spec": {"volumeMode": "Block"}}),
            ),
            pv("plain", "3Gi", RWO, json!({})),
        ];
        let fast = pvc("1Gi", RWO, json!({"spec": {"storageClassName": "fast"}}));
        assert_eq!(
            name(best_match(&fast, &volumes, false).unwrap()),
            Some("fast")
        );
        let gold = pvc(
            "1Gi",
            RWO,
            json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}}),
        );
        assert_eq!(
            name(best_match(&gold, &volumes, false).unwrap()),
            Some("labelled")
        );
        let block = pvc("1Gi", RWO, json!({"spec": {"volumeMode": "Block"}}));
        assert_eq!(
            name(best_match(&block, &volumes, false).unwrap()),
            Some("block")
        );
        // No class: only volumes without one; "plain" is smaller than "labelled".
        let bare = pvc("1Gi", RWO, json!({}));
        assert_eq!(
            name(best_match(&bare, &volumes, false).unwrap()),
            Some("plain")
        );
    }

    #[test]
    fn fewer_access_modes_come_before_size() {
        let volumes = [
            pv(
                "rwo-rox",
                "1Gi",
                &["ReadWriteOnce", "ReadOnlyMany"],
                json!({}),
            ),
            pv("rwo-big", "5Gi", RWO, json!({})),
            pv("rox", "1Gi", &["ReadOnlyMany"], json!({})),
        ];
        let claim = pvc("1Gi", RWO, json!({}));
        assert_eq!(
            name(best_match(&claim, &volumes, false).unwrap()),
            Some("rwo-big")
        );
        let both = pvc("1Gi", &["ReadWriteOnce", "ReadOnlyMany"], json!({}));
        assert_eq!(
            name(best_match(&both, &volumes, false).unwrap()),
            Some("rwo-rox")
        );
        let rwx = pvc("1Gi", &["ReadWriteMany"], json!({}));
        assert_eq!(name(best_match(&rwx, &volumes, false).unwrap()), None);
    }

    #[test]
    fn pre_bound_volumes_and_delayed_binding() {
        let mine = json!({"spec": {"claimRef": {"namespace": "default", "name": "data"}}});
        let other = json!({"spec": {"claimRef": {"namespace": "default", "name": "other"}}});
        let volumes = [
            pv("small", "1Gi", RWO, json!({})),
            pv("reserved", "9Gi", RWO, mine),
            pv("taken", "1Gi", RWO, other),
        ];
        let claim = pvc("1Gi", RWO, json!({}));
        // The volume reserved for the claim wins over a smaller free one, even when binding
        // waits for the first consumer.
        assert_eq!(
            name(best_match(&claim, &volumes, false).unwrap()),
            Some("reserved")
        );
        assert_eq!(
            name(best_match(&claim, &volumes, true).unwrap()),
            Some("reserved")
        );
        assert_eq!(name(best_match(&claim, &volumes[..1], true).unwrap()), None);
        // A claimRef with another UID is someone else's.
        let stale = pv(
            "stale",
            "1Gi",
            RWO,
            json!({"spec": {"claimRef": {"namespace": "default", "name": "data", "uid": "u0"}}}),
        );
        assert!(!is_bound_to(&stale, &claim));
    }

    #[test]
    fn only_available_volumes_match() {
        let volumes = [pv(
            "released",
            "1Gi",
            RWO,
            json!({"status": {"phase": "Released"}}),
        )];
        let claim = pvc("1Gi", RWO, json!({}));
        assert_eq!(name(best_match(&claim, &volumes, false).unwrap()), None);
    }

    #[test]
    fn a_named_volume_must_satisfy_the_claim() {
        let claim = pvc("2Gi", RWO, json!({}));
        assert_eq!(
            satisfies(&pv("v", "1Gi", RWO, json!({})), &claim),
            Err("requested PV is too small".into())
        );
        assert_eq!(
            satisfies(&pv("v", "2Gi", &["ReadOnlyMany"], json!({})), &claim),
            Err("incompatible accessMode".into())
        );
        assert_eq!(
            satisfies(
                &pv("v", "2Gi", RWO, json!({"spec": {"storageClassName": "x"}})),
                &claim
            ),
            Err("storageClassName does not match".into())
        );
        assert_eq!(satisfies(&pv("v", "2Gi", RWO, json!({})), &claim), Ok(()));
    }
}
