//! The default roles grant what upstream's do: requests each must allow and must not, checked
//! with the authorizer's own matching; and reconciliation's decisions.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use minik8s_api::rbac::{Attributes, aggregate, rules_allow, same_rules};
use minik8s_api::strategy::Kind;

use super::*;

/// The cluster roles as stored once the aggregation controller has run to a fixed point.
fn aggregated_cluster_roles() -> Vec<ClusterRole> {
    let mut roles = policy().cluster_roles;
    loop {
        let mut changed = false;
        for i in 0..roles.len() {
            if let Some(rules) = aggregate(&roles[i], &roles).unwrap()
                && !same_rules(&rules, roles[i].rules.as_deref().unwrap_or_default())
            {
                roles[i].rules = Some(rules);
                changed = true;
            }
        }
        if !changed {
            return roles;
        }
    }
}

fn rules_of(name: &str) -> Vec<PolicyRule> {
    if let Some(r) = aggregated_cluster_roles()
        .into_iter()
        .find(|r| r.metadata.name.as_deref() == Some(name))
    {
        return r.rules.unwrap_or_default();
    }
    policy()
        .roles
        .into_iter()
        .find(|r| r.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no default role {name}"))
        .rules
        .unwrap_or_default()
}

/// `verb group/resource[/sub]` in namespace `ns` (no name).
fn req(verb: &str, group: &str, resource: &str) -> Attributes {
    let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
    Attributes::resource("u", &[], verb, group, resource)
        .in_namespace("ns")
        .subresource(sub)
}

fn path(verb: &str, p: &str) -> Attributes {
    Attributes::non_resource("u", &[], verb, p)
}

#[track_caller]
fn check(role: &str, allowed: &[Attributes], denied: &[Attributes]) {
    let rules = rules_of(role);
    for a in allowed {
        assert!(rules_allow(&rules, a), "{role} must allow {a:?}");
    }
    for a in denied {
        assert!(!rules_allow(&rules, a), "{role} must not allow {a:?}");
    }
}

#[test]
fn view_reads_all_but_secrets_and_writes_nothing() {
    check(
        "view",
        &[
            req("get", "", "pods"),
            req("list", "", "pods/log"),
            req("watch", "apps", "deployments"),
            req("get", "apps", "deployments/scale"),
            req("list", "batch", "cronjobs"),
            req("get", "", "namespaces"),
            req("list", "discovery.k8s.io", "endpointslices"),
            req("get", "networking.k8s.io", "ingresses"),
        ],
        &[
            req("get", "", "secrets"),
            req("create", "", "pods"),
            req("get", "", "pods/exec"),
            req("get", "rbac.authorization.k8s.io", "roles"),
            req("delete", "apps", "deployments"),
            req("get", "coordination.k8s.io", "leases"),
        ],
    );
}

#[test]
fn edit_writes_workloads_but_not_roles() {
    check(
        "edit",
        &[
            req("create", "apps", "deployments"),
            req("update", "apps", "deployments/scale"),
            req("create", "", "pods"),
            req("create", "", "pods/exec"),
            req("get", "", "secrets"),
            req("create", "", "secrets"),
            req("create", "", "serviceaccounts/token"),
            req("impersonate", "", "serviceaccounts"),
            req("create", "", "pods/eviction"),
            req("update", "coordination.k8s.io", "leases"),
            // What it has from `view`.
            req("get", "", "pods/log"),
        ],
        &[
            req("create", "rbac.authorization.k8s.io", "roles"),
            req("create", "rbac.authorization.k8s.io", "rolebindings"),
            req("update", "", "resourcequotas"),
            req(
                "create",
                "authorization.k8s.io",
                "localsubjectaccessreviews",
            ),
            req("delete", "", "namespaces"),
        ],
    );
}

#[test]
fn admin_grants_within_the_namespace() {
    check(
        "admin",
        &[
            req("create", "rbac.authorization.k8s.io", "rolebindings"),
            req("delete", "rbac.authorization.k8s.io", "roles"),
            req(
                "create",
                "authorization.k8s.io",
                "localsubjectaccessreviews",
            ),
            req("create", "apps", "deployments"),
            req("get", "", "secrets"),
            req("get", "", "pods"),
        ],
        &[
            req("update", "", "resourcequotas"),
            req("create", "rbac.authorization.k8s.io", "clusterroles"),
            req("delete", "", "namespaces"),
            req("get", "", "nodes"),
        ],
    );
}

#[test]
fn cluster_admin_may_do_anything() {
    check(
        "cluster-admin",
        &[
            req("delete", "", "nodes"),
            req("escalate", "rbac.authorization.k8s.io", "clusterroles"),
            req("create", "example.com", "widgets/status"),
            path("get", "/metrics"),
            path("post", "/anything"),
        ],
        &[],
    );
}

#[test]
fn public_info_is_health_and_version_only() {
    let public = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let allowed: Vec<_> = public.iter().map(|p| path("get", p)).collect();
    check(
        "system:public-info-viewer",
        &allowed,
        &[
            path("get", "/version/x"),
            path("get", "/api"),
            path("get", "/metrics"),
            path("get", "/healthz/etcd"),
            path("post", "/healthz"),
            req("get", "", "pods"),
        ],
    );
}

#[test]
fn discovery_and_basic_user() {
    check(
        "system:discovery",
        &[
            path("get", "/api"),
            path("get", "/apis/apps/v1"),
            path("get", "/openapi/v2"),
            path("get", "/healthz"),
            path("get", "/version"),
        ],
        &[
            path("get", "/metrics"),
            path("get", "/logs"),
            path("put", "/api"),
        ],
    );
    check(
        "system:basic-user",
        &[
            req("create", "authorization.k8s.io", "selfsubjectaccessreviews"),
            req("create", "authorization.k8s.io", "selfsubjectrulesreviews"),
            req("create", "authentication.k8s.io", "selfsubjectreviews"),
        ],
        &[
            req("create", "authorization.k8s.io", "subjectaccessreviews"),
            req("get", "", "pods"),
        ],
    );
}

#[test]
fn components_get_what_they_run_on() {
    check(
        "system:node",
        &[
            req("get", "", "nodes"),
            req("create", "", "nodes"),
            req("patch", "", "nodes/status"),
            req("get", "", "secrets"),
            req("create", "", "pods"),
            req("delete", "", "pods"),
            req("update", "", "pods/status"),
            req("update", "coordination.k8s.io", "leases"),
            req("create", "", "serviceaccounts/token"),
            req(
                "create",
                "certificates.k8s.io",
                "certificatesigningrequests",
            ),
        ],
        &[
            req("update", "", "pods"),
            req("delete", "", "namespaces"),
            req("update", "apps", "deployments"),
            req("create", "", "secrets"),
        ],
    );
    let lease = |verb: &str, name: &str| {
        req(verb, "coordination.k8s.io", "leases")
            .in_namespace("kube-system")
            .named(name)
    };
    check(
        "system:kube-scheduler",
        &[
            req("create", "", "pods/binding"),
            req("create", "", "bindings"),
            req("get", "", "nodes"),
            req("patch", "", "pods/status"),
            req("delete", "", "pods"),
            lease("update", "kube-scheduler"),
            lease("create", ""),
        ],
        &[
            req("update", "", "nodes"),
            req("create", "", "pods"),
            lease("update", "kube-controller-manager"),
        ],
    );
    check(
        "system:kube-controller-manager",
        &[
            req("list", "apps", "deployments"),
            req("watch", "", "secrets"),
            req("create", "", "serviceaccounts"),
            req("create", "", "serviceaccounts/token"),
            lease("update", "kube-controller-manager"),
        ],
        &[
            req("create", "", "pods"),
            req("get", "apps", "deployments"),
            lease("update", "kube-scheduler"),
        ],
    );
    check(
        "system:node-proxier",
        &[
            req("list", "", "services"),
            req("watch", "discovery.k8s.io", "endpointslices"),
            req("get", "", "nodes"),
            req("create", "events.k8s.io", "events"),
        ],
        &[req("get", "", "services"), req("create", "", "services")],
    );
    check(
        "system:monitoring",
        &[path("get", "/metrics"), path("get", "/livez/ping")],
        &[path("get", "/api")],
    );
}

#[test]
fn controllers_and_signers() {
    check(
        "system:controller:clusterrole-aggregation-controller",
        &[
            req("escalate", "rbac.authorization.k8s.io", "clusterroles"),
            req("update", "rbac.authorization.k8s.io", "clusterroles"),
        ],
        &[
            req("create", "rbac.authorization.k8s.io", "clusterroles"),
            req("delete", "rbac.authorization.k8s.io", "clusterroles"),
        ],
    );
    check(
        "system:controller:deployment-controller",
        &[
            req("create", "apps", "replicasets"),
            req("update", "apps", "deployments/status"),
        ],
        &[req("delete", "apps", "deployments")],
    );
    let signer = |name: &str| {
        Attributes::resource("u", &[], "approve", "certificates.k8s.io", "signers").named(name)
    };
    check(
        "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
        &[signer("kubernetes.io/kube-apiserver-client-kubelet")],
        &[signer("kubernetes.io/kube-apiserver-client")],
    );
    let cm = |name: &str| {
        req("get", "", "configmaps")
            .in_namespace("kube-system")
            .named(name)
    };
    check(
        "extension-apiserver-authentication-reader",
        &[cm("extension-apiserver-authentication")],
        &[cm("other")],
    );
}

/// The names of upstream's 1.32 defaults, read from its bootstrap policy's testdata.
#[test]
fn the_policy_has_upstreams_objects() {
    let p = policy();
    let names = |v: Vec<&ObjectMeta>| -> BTreeSet<String> {
        v.into_iter()
            .map(|m| m.name.clone().unwrap_or_default())
            .collect()
    };
    let roles = names(p.cluster_roles.iter().map(|r| &r.metadata).collect());
    for name in [
        "admin",
        "cluster-admin",
        "edit",
        "view",
        "system:aggregate-to-admin",
        "system:aggregate-to-edit",
        "system:aggregate-to-view",
        "system:auth-delegator",
        "system:basic-user",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "system:certificates.k8s.io:kube-apiserver-client-approver",
        "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
        "system:certificates.k8s.io:kubelet-serving-approver",
        "system:certificates.k8s.io:legacy-unknown-approver",
        "system:discovery",
        "system:heapster",
        "system:kube-aggregator",
        "system:kube-controller-manager",
        "system:kube-dns",
        "system:kube-scheduler",
        "system:kubelet-api-admin",
        "system:monitoring",
        "system:node",
        "system:node-bootstrapper",
        "system:node-problem-detector",
        "system:node-proxier",
        "system:persistent-volume-provisioner",
        "system:public-info-viewer",
        "system:service-account-issuer-discovery",
        "system:volume-scheduler",
        "system:controller:attachdetach-controller",
        "system:controller:certificate-controller",
        "system:controller:clusterrole-aggregation-controller",
        "system:controller:cronjob-controller",
        "system:controller:daemon-set-controller",
        "system:controller:deployment-controller",
        "system:controller:disruption-controller",
        "system:controller:endpoint-controller",
        "system:controller:endpointslice-controller",
        "system:controller:endpointslicemirroring-controller",
        "system:controller:ephemeral-volume-controller",
        "system:controller:expand-controller",
        "system:controller:generic-garbage-collector",
        "system:controller:horizontal-pod-autoscaler",
        "system:controller:job-controller",
        "system:controller:legacy-service-account-token-cleaner",
        "system:controller:namespace-controller",
        "system:controller:node-controller",
        "system:controller:persistent-volume-binder",
        "system:controller:pod-garbage-collector",
        "system:controller:pv-protection-controller",
        "system:controller:pvc-protection-controller",
        "system:controller:replicaset-controller",
        "system:controller:replication-controller",
        "system:controller:resourcequota-controller",
        "system:controller:root-ca-cert-publisher",
        "system:controller:route-controller",
        "system:controller:service-account-controller",
        "system:controller:service-controller",
        "system:controller:statefulset-controller",
        "system:controller:ttl-after-finished-controller",
        "system:controller:ttl-controller",
        "system:controller:validatingadmissionpolicy-status-controller",
    ] {
        assert!(roles.contains(name), "missing cluster role {name}");
    }
    assert_eq!(
        roles.len(),
        p.cluster_roles.len(),
        "duplicate cluster roles"
    );
    let upstream = roles.iter().filter(|r| !r.starts_with("system:minik8s:"));
    assert_eq!(upstream.count(), 64);

    // Every binding binds a default role, and every controller is bound to its account.
    let bindings = names(
        p.cluster_role_bindings
            .iter()
            .map(|b| &b.metadata)
            .collect(),
    );
    assert_eq!(bindings.len(), p.cluster_role_bindings.len());
    for b in &p.cluster_role_bindings {
        assert!(roles.contains(&b.role_ref.name), "{:?}", b.role_ref);
    }
    for r in roles.iter().filter(|r| r.starts_with("system:controller:")) {
        let b = p
            .cluster_role_bindings
            .iter()
            .find(|b| b.metadata.name.as_ref() == Some(r))
            .unwrap_or_else(|| panic!("{r} is bound to no one"));
        let s = &b.subjects.as_ref().unwrap()[0];
        assert_eq!(
            (s.kind.as_str(), s.namespace.as_deref(), s.name.as_str()),
            (
                "ServiceAccount",
                Some("kube-system"),
                &r["system:controller:".len()..]
            )
        );
    }
    let public = p
        .cluster_role_bindings
        .iter()
        .find(|b| b.metadata.name.as_deref() == Some("system:public-info-viewer"))
        .unwrap();
    let subjects: Vec<_> = public.subjects.iter().flatten().map(|s| &s.name).collect();
    assert_eq!(subjects, ["system:authenticated", "system:unauthenticated"]);
    for b in &p.role_bindings {
        assert!(
            p.roles
                .iter()
                .any(|r| r.metadata.name.as_ref() == Some(&b.role_ref.name)
                    && r.metadata.namespace == b.metadata.namespace),
            "{:?}",
            b.metadata
        );
    }
}

#[test]
fn every_object_is_labelled_annotated_sorted_and_valid() {
    let p = policy();
    let mut metas: Vec<&ObjectMeta> = Vec::new();
    metas.extend(p.cluster_roles.iter().map(|r| &r.metadata));
    metas.extend(p.cluster_role_bindings.iter().map(|r| &r.metadata));
    metas.extend(p.roles.iter().map(|r| &r.metadata));
    metas.extend(p.role_bindings.iter().map(|r| &r.metadata));
    for m in metas {
        let label = m.labels.as_ref().and_then(|l| l.get(BOOTSTRAPPING_LABEL.0));
        assert_eq!(label.map(String::as_str), Some("rbac-defaults"), "{m:?}");
        let auto = m
            .annotations
            .as_ref()
            .and_then(|a| a.get(AUTOUPDATE_ANNOTATION));
        assert_eq!(auto.map(String::as_str), Some("true"), "{m:?}");
    }
    let sorted = |v: &[String]| v.windows(2).all(|w| w[0] < w[1]);
    let rules = p
        .cluster_roles
        .iter()
        .flat_map(|r| r.rules.iter().flatten())
        .chain(p.roles.iter().flat_map(|r| r.rules.iter().flatten()));
    for r in rules {
        assert!(sorted(&r.verbs), "{r:?}");
        for list in [
            &r.api_groups,
            &r.resources,
            &r.resource_names,
            &r.non_resource_urls,
        ] {
            assert!(sorted(list.as_deref().unwrap_or_default()), "{r:?}");
        }
    }
    for r in &p.cluster_roles {
        let mut errs = Vec::new();
        r.validate(&mut errs);
        assert!(errs.is_empty(), "{:?}: {errs:?}", r.metadata.name);
    }
    for r in &p.roles {
        let mut errs = Vec::new();
        r.validate(&mut errs);
        assert!(errs.is_empty(), "{:?}: {errs:?}", r.metadata.name);
    }
}

fn stored_view() -> ClusterRole {
    let mut view = cluster_role(
        "custom",
        vec![
            rule(READ, &[LEGACY], &["pods", "services"]),
            rule(&["get"], &[LEGACY], &["configmaps"]),
        ],
    );
    view.metadata.resource_version = Some("7".into());
    view
}

#[test]
fn reconciling_a_role_adds_missing_rules_and_keeps_extra_ones() {
    let expected = cluster_role(
        "custom",
        vec![rule(READ, &[LEGACY], &["pods", "endpoints"])],
    );
    let mut existing = stored_view();
    existing.metadata.labels = Some(BTreeMap::from([(
        BOOTSTRAPPING_LABEL.0.to_string(),
        "changed".to_string(),
    )]));
    let result = compute_reconciled_role(&existing, &expected);
    assert_eq!(result.operation, Operation::Update);
    assert!(!result.protected);
    // The endpoints permissions come back, one by one; what was there stays first.
    let rules = result.role.rules.clone().unwrap();
    assert_eq!(rules[..2], existing.rules.clone().unwrap()[..]);
    assert_eq!(rules.len(), 5);
    assert_eq!(result.missing_rules.len(), 3);
    for verb in READ {
        assert!(rules_allow(&rules, &req(verb, "", "endpoints")));
    }
    // The administrator's label value wins; the annotation comes back.
    let labels = result.role.metadata.labels.clone().unwrap();
    assert_eq!(labels[BOOTSTRAPPING_LABEL.0], "changed");
    assert_eq!(
        result.role.metadata.annotations.clone().unwrap()[AUTOUPDATE_ANNOTATION],
        "true"
    );
    assert_eq!(result.role.metadata.resource_version.as_deref(), Some("7"));

    // Once complete, nothing to do.
    let again = compute_reconciled_role(&result.role, &expected);
    assert_eq!(again.operation, Operation::None);

    // Opted out: the decision is still made, and marked protected.
    let mut protected = existing.clone();
    protected.metadata.annotations = Some(BTreeMap::from([(
        AUTOUPDATE_ANNOTATION.to_string(),
        "false".to_string(),
    )]));
    let result = compute_reconciled_role(&protected, &expected);
    assert!(result.protected);
}

#[test]
fn reconciling_an_aggregated_role_merges_selectors() {
    let expected = aggregated_cluster_role("agg", AGGREGATE_TO_VIEW, &[]);
    // Filled by the aggregation controller: no rule is missing.
    let mut existing = expected.clone();
    existing.rules = Some(vec![rule(READ, &[LEGACY], &["pods"])]);
    assert_eq!(
        compute_reconciled_role(&existing, &expected).operation,
        Operation::None
    );
    // An administrator's extra selector stays; a missing default one comes back.
    let extra = LabelSelector {
        match_labels: Some(BTreeMap::from([("mine".to_string(), "true".to_string())])),
        ..Default::default()
    };
    existing.aggregation_rule = Some(AggregationRule {
        cluster_role_selectors: Some(vec![extra.clone()]),
    });
    let result = compute_reconciled_role(&existing, &expected);
    assert_eq!(result.operation, Operation::Update);
    let selectors = result
        .role
        .aggregation_rule
        .unwrap()
        .cluster_role_selectors
        .unwrap();
    assert_eq!(selectors.len(), 2);
    assert_eq!(selectors[0], extra);
    // A role that is not aggregated by default loses an aggregation rule.
    let plain = cluster_role("agg", vec![]);
    let result = compute_reconciled_role(&existing, &plain);
    assert_eq!(result.operation, Operation::Update);
    assert!(result.role.aggregation_rule.is_none());
}

#[test]
fn reconciling_a_binding_adds_missing_subjects() {
    let expected = cluster_binding(
        "b",
        vec![
            group("system:authenticated"),
            service_account("kube-system", "x"),
        ],
    );
    let mut existing = expected.clone();
    // As a client may have stored it: the same account without its apiGroup, plus a user.
    existing.subjects = Some(vec![
        Subject {
            api_group: None,
            ..service_account("kube-system", "x")
        },
        user("alice"),
    ]);
    let result = compute_reconciled_binding(&existing, &expected);
    assert_eq!(result.operation, Operation::Update);
    assert_eq!(result.missing_subjects, vec![group("system:authenticated")]);
    let subjects = result.binding.subjects.clone().unwrap();
    assert_eq!(subjects.len(), 3);
    assert_eq!(subjects[1], user("alice"));
    assert_eq!(
        compute_reconciled_binding(&result.binding, &expected).operation,
        Operation::None
    );
    // Another roleRef cannot be updated: the binding is made again.
    let mut other = existing.clone();
    other.role_ref.name = "elsewhere".into();
    let result = compute_reconciled_binding(&other, &expected);
    assert_eq!(result.operation, Operation::Recreate);
    assert_eq!(result.binding, expected);
}

/// The API server's kubelet-client certificate is in no group: what kubelets let it do is
/// `system:kubelet-api-admin`, bound to its user.
#[test]
fn the_api_server_may_use_kubelets() {
    check(
        "system:kubelet-api-admin",
        &[
            req("get", "", "nodes"),
            req("proxy", "", "nodes"),
            req("get", "", "nodes/proxy"),
            req("create", "", "nodes/proxy"),
            req("get", "", "nodes/stats"),
            req("get", "", "nodes/metrics"),
            req("get", "", "nodes/log"),
        ],
        &[
            req("update", "", "nodes"),
            req("get", "", "nodes/spec"),
            req("get", "", "secrets"),
        ],
    );
    let binding = policy()
        .cluster_role_bindings
        .into_iter()
        .find(|b| b.role_ref.name == "system:kubelet-api-admin")
        .expect("a binding of system:kubelet-api-admin");
    let subjects: Vec<_> = binding
        .subjects
        .iter()
        .flatten()
        .map(|s| (s.kind.as_str(), s.name.as_str()))
        .collect();
    assert_eq!(subjects, [("User", crate::kubelet::APISERVER_CLIENT)]);
}
