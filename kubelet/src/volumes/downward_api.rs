//! downwardAPI: the pod's own metadata and its containers' resources as files, formatted as
//! upstream's fieldpath and resource helpers format them, on a tmpfs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{Container, DownwardAPIVolumeFile, Pod, ResourceFieldSelector};

use super::NodeAllocatable;
use super::atomic_writer::{FileProjection, Payload};
use minik8s_api::quantity::Quantity;

use super::util::{aggregate, ceil_div};

pub(crate) const PLUGIN: &str = "kubernetes.io~downward-api";

/// Upstream's downwardapi.CollectData: one file per item; errors of all items are reported.
pub(crate) fn collect(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    allocatable: &NodeAllocatable,
    default_mode: i32,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let mode = item.mode.unwrap_or(default_mode) as u32;
        let value = if let Some(f) = &item.field_ref {
            field_path_value(pod, &f.field_path)
        } else if let Some(r) = &item.resource_field_ref {
            resource_value(r, pod, allocatable)
        } else {
            Ok(String::new())
        };
        match value {
            Ok(v) => {
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data: v.into_bytes(),
                        mode,
                    },
                );
            }
            Err(e) => {
                tracing::error!(field = %item.path, error = %e, "unable to extract downward API field");
                errors.push(e);
            }
        }
    }
    aggregate(errors).map(|()| payload)
}

/// Upstream's SplitMaybeSubscriptedPath: `metadata.labels['key']` → (`metadata.labels`, `key`).
fn split_subscript(field_path: &str) -> Option<(&str, &str)> {
    let s = field_path.strip_suffix("']")?;
    let (path, subscript) = s.split_once("['")?;
    (!path.is_empty()).then_some((path, subscript))
}

/// Upstream's fieldpath.ExtractFieldPathAsString, for the fields a volume may project.
pub(crate) fn field_path_value(pod: &Pod, field_path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    if let Some((path, subscript)) = split_subscript(field_path) {
        return match path {
            "metadata.annotations" => Ok(annotations.get(subscript).cloned().unwrap_or_default()),
            "metadata.labels" => Ok(labels.get(subscript).cloned().unwrap_or_default()),
            _ => Err(format!(
                "fieldPath {field_path:?} does not support subscript"
            )),
        };
    }
    match field_path {
        "metadata.annotations" => Ok(format_map(annotations)),
        "metadata.labels" => Ok(format_map(labels)),
        "metadata.name" => Ok(meta.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(meta.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Ok(meta.uid.clone().unwrap_or_default()),
        _ => Err(format!("unsupported fieldPath: {field_path}")),
    }
}

/// Upstream's fieldpath.FormatMap: `key="value"` lines sorted by key, values quoted as Go's
/// `%q` quotes them, no trailing newline.
pub(crate) fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Go's strconv.Quote for valid UTF-8.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c == ' ' || !(c.is_control() || c.is_whitespace() || is_format(c)) => out.push(c),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// Unicode format characters Go does not print as is (soft hyphen, zero-width marks, BOM...).
fn is_format(c: char) -> bool {
    matches!(c as u32, 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB)
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Result<&'a Container, String> {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| s.containers.iter())
        .chain(
            spec.into_iter()
                .flat_map(|s| s.init_containers.iter().flatten()),
        )
        .find(|c| c.name == name)
        .ok_or_else(|| format!("container {name} not found"))
}

fn quantity(c: &Container, group: &str, resource: &str) -> Option<Quantity> {
    let r = c.resources.as_ref()?;
    let list = if group == "limits" {
        r.limits.as_ref()
    } else {
        r.requests.as_ref()
    }?;
    list.get(resource).and_then(|q| Quantity::parse(&q.0))
}

/// Upstream's ExtractResourceValueByContainerNameAndNodeAllocatable: a container's limit or
/// request divided by the divisor, rounded up; missing limits are the node's allocatable.
pub(crate) fn resource_value(
    selector: &ResourceFieldSelector,
    pod: &Pod,
    allocatable: &NodeAllocatable,
) -> Result<String, String> {
    let container = find_container(pod, selector.container_name.as_deref().unwrap_or(""))?;
    let divisor = selector
        .divisor
        .as_ref()
        .and_then(|q| Quantity::parse(&q.0))
        .filter(|d| d.milli_value() != 0);
    let (group, resource) = selector
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {}", selector.resource))?;
    let supported = matches!(resource, "cpu" | "memory" | "ephemeral-storage")
        || resource.starts_with("hugepages-");
    if !matches!(group, "limits" | "requests") || !supported {
        return Err(format!(
            "unsupported container resource : {}",
            selector.resource
        ));
    }
    let mut value = quantity(container, group, resource);
    if group == "limits" && value.is_none_or(|v| v.milli_value() == 0) {
        // MergeContainerResourceLimits: an unset limit is the node's allocatable.
        let cap = match resource {
            "cpu" => Some(Quantity::parse(&format!("{}m", allocatable.cpu_millis))),
            "memory" => Some(Quantity::parse(&allocatable.memory.to_string())),
            "ephemeral-storage" => {
                Some(Quantity::parse(&allocatable.ephemeral_storage.to_string()))
            }
            _ => None,
        };
        if let Some(cap) = cap {
            value = cap;
        }
    }
    let zero = Quantity::parse("0").expect("zero");
    let value = value.unwrap_or(zero);
    let out = if resource == "cpu" {
        let d = divisor.map(|d| d.milli_value()).unwrap_or(1000);
        ceil_div(value.milli_value(), d)
    } else {
        let d = divisor.map(|d| d.value()).filter(|d| *d != 0).unwrap_or(1);
        ceil_div(value.value(), d)
    };
    Ok(out.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web", "namespace": "prod", "uid": "1234",
                "labels": {"zeta": "last", "app": "web", "quote": "a \"b\"\n"},
                "annotations": {"build": "42"}
            },
            "spec": {"containers": [
                {"name": "main", "resources": {
                    "limits": {"cpu": "250m", "memory": "64Mi"},
                    "requests": {"cpu": "100m", "memory": "32Mi"}}},
                {"name": "side"}
            ]}
        }))
        .unwrap()
    }

    fn alloc() -> NodeAllocatable {
        NodeAllocatable {
            cpu_millis: 2000,
            memory: 8 << 30,
            ephemeral_storage: 100 << 30,
        }
    }

    #[test]
    fn metadata_fields() {
        let p = pod();
        assert_eq!(field_path_value(&p, "metadata.name").unwrap(), "web");
        assert_eq!(field_path_value(&p, "metadata.namespace").unwrap(), "prod");
        assert_eq!(field_path_value(&p, "metadata.uid").unwrap(), "1234");
        assert_eq!(
            field_path_value(&p, "metadata.labels").unwrap(),
            "app=\"web\"\nquote=\"a \\\"b\\\"\\n\"\nzeta=\"last\""
        );
        assert_eq!(
            field_path_value(&p, "metadata.annotations").unwrap(),
            "build=\"42\""
        );
        assert_eq!(
            field_path_value(&p, "metadata.labels['app']").unwrap(),
            "web"
        );
        assert_eq!(
            field_path_value(&p, "metadata.annotations['none']").unwrap(),
            ""
        );
        assert_eq!(
            field_path_value(&p, "spec.nodeName"),
            Err("unsupported fieldPath: spec.nodeName".into())
        );
        assert_eq!(
            field_path_value(&p, "metadata.name['x']"),
            Err("fieldPath \"metadata.name['x']\" does not support subscript".into())
        );
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("plain"), "\"plain\"");
        assert_eq!(go_quote("tab\there"), "\"tab\\there\"");
        assert_eq!(go_quote("\u{1}"), "\"\\x01\"");
        assert_eq!(go_quote("héllo ✓"), "\"héllo ✓\"");
        assert_eq!(go_quote("\u{200b}"), "\"\\u200b\"");
        assert_eq!(go_quote("back\\slash"), "\"back\\\\slash\"");
    }

    #[test]
    fn resources() {
        let p = pod();
        let a = alloc();
        let sel = |c: &str, r: &str, d: Option<&str>| ResourceFieldSelector {
            container_name: Some(c.into()),
            resource: r.into(),
            divisor: d.map(|d| k8s_openapi::apimachinery::pkg::api::resource::Quantity(d.into())),
        };
        let v = |c, r, d| resource_value(&sel(c, r, d), &p, &a);
        assert_eq!(v("main", "limits.cpu", None).unwrap(), "1");
        assert_eq!(v("main", "limits.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(v("main", "requests.cpu", Some("1m")).unwrap(), "100");
        assert_eq!(v("main", "limits.memory", None).unwrap(), "67108864");
        assert_eq!(v("main", "limits.memory", Some("1Mi")).unwrap(), "64");
        assert_eq!(v("main", "requests.memory", Some("1Mi")).unwrap(), "32");
        // No limit: the node's allocatable.
        assert_eq!(v("side", "limits.cpu", None).unwrap(), "2");
        assert_eq!(v("side", "limits.memory", Some("1Gi")).unwrap(), "8");
        assert_eq!(v("side", "requests.cpu", None).unwrap(), "0");
        assert_eq!(
            v("nope", "limits.cpu", None),
            Err("container nope not found".into())
        );
        assert_eq!(
            v("main", "limits.gpu", None),
            Err("unsupported container resource : limits.gpu".into())
        );
    }

    #[test]
    fn collect_items_and_errors() {
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "meta/name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o400},
            {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu", "divisor": "1m"}}
        ]))
        .unwrap();
        let p = collect(&items, &pod(), &alloc(), 0o644).unwrap();
        assert_eq!(p["meta/name"].data, b"web");
        assert_eq!(p["meta/name"].mode, 0o400);
        assert_eq!(p["labels"].mode, 0o644);
        assert_eq!(p["cpu"].data, b"250");
        let bad: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "a", "fieldRef": {"fieldPath": "status.podIP"}},
            {"path": "b", "fieldRef": {"fieldPath": "spec.nodeName"}}
        ]))
        .unwrap();
        assert_eq!(
            collect(&bad, &pod(), &alloc(), 0o644),
            Err(
                "[unsupported fieldPath: status.podIP, unsupported fieldPath: spec.nodeName]"
                    .into()
            )
        );
    }
}
