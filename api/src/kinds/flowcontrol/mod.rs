//! flowcontrol.apiserver.k8s.io (API Priority and Fairness) FlowSchemas and
//! PriorityLevelConfigurations. minik8s does not queue requests by them; it serves them so
//! that clients and controllers that read or manage them (kubectl, the apf configuration
//! controllers of other servers, conformance) find upstream's objects and rules, including
//! the two mandatory objects of each kind that every server keeps ([`bootstrap`]).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::flowcontrol::v1::{
    ExemptPriorityLevelConfiguration, FlowDistinguisherMethod, FlowSchema, FlowSchemaSpec,
    GroupSubject, LimitResponse, LimitedPriorityLevelConfiguration, NonResourcePolicyRule,
    PolicyRulesWithSubjects, PriorityLevelConfiguration, PriorityLevelConfigurationReference,
    PriorityLevelConfigurationSpec, QueuingConfiguration, ResourcePolicyRule, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, num, string, text};
use crate::validation::{ErrorKind, Errors, FieldError, Path, dns1123_label, dns1123_subdomain};

mod validation;

use self::validation::{
    validate_condition_types, validate_flow_schema_spec, validate_priority_level_spec,
    whole_spec_invalid,
};

const EXEMPT: &str = "exempt";
const CATCH_ALL: &str = "catch-all";
const MAX_MATCHING_PRECEDENCE: i32 = 10_000;
const MAX_QUEUES: i32 = 10_000_000;
/// Shuffle sharding hashes to 60 bits (upstream's `shufflesharding.MaxHashBits`).
const MAX_HASH_BITS: i32 = 60;
const AUTO_UPDATE_ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";

const DISTINGUISHER_METHODS: &[&str] = &["ByNamespace", "ByUser"];
const SUBJECT_KINDS: &[&str] = &["Group", "ServiceAccount", "User"];
const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "proxy",
    "update",
    "watch",
];
const PRIORITY_LEVEL_TYPES: &[&str] = &["Exempt", "Limited"];
const LIMIT_RESPONSE_TYPES: &[&str] = &["Queue", "Reject"];

impl Kind for FlowSchema {
    const COLUMNS: &'static [Column] = FLOW_SCHEMA_COLUMNS;

    spec_and_status!(generation);

    fn default_fields(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            default_flow_schema_spec(spec);
        }
    }

    fn prepare_create(&mut self) {
        self.status = Some(Default::default());
    }

    fn validate(&self, errs: &mut Errors) {
        let sp = Path::new("spec");
        let fs_name = self.metadata.name.as_deref().unwrap_or("");
        let spec = self.spec.clone().unwrap_or_default();
        validate_flow_schema_spec(fs_name, &spec, &sp, errs);
        let (mandatory, _) = mandatory();
        if let Some(m) = mandatory
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(fs_name))
            && m.spec.clone().unwrap_or_default() != spec
        {
            errs.push(whole_spec_invalid(format!(
                "spec of '{fs_name}' must equal the fixed value"
            )));
        }
        let conditions = self.status.as_ref().and_then(|s| s.conditions.as_deref());
        let types = conditions.into_iter().flatten().map(|c| c.type_.as_deref());
        validate_condition_types(types, errs);
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(flow_schema_cells(self, now))
    }
}

impl Kind for PriorityLevelConfiguration {
    const COLUMNS: &'static [Column] = PRIORITY_LEVEL_COLUMNS;

    spec_and_status!(generation);

    fn default_fields(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            default_priority_level_spec(spec);
        }
    }

    fn prepare_create(&mut self) {
        self.status = Some(Default::default());
    }

    fn validate(&self, errs: &mut Errors) {
        let sp = Path::new("spec");
        let pl_name = self.metadata.name.as_deref().unwrap_or("");
        let spec = self.spec.clone().unwrap_or_default();
        validate_priority_level_spec(pl_name, &spec, &sp, errs);
        let (_, mandatory) = mandatory();
        if let Some(m) = mandatory
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(pl_name))
        {
            let want = m.spec.clone().unwrap_or_default();
            if pl_name == EXEMPT {
                // The exempt level's `exempt` settings are the admin's to tune.
                let mut have = spec.clone();
                have.exempt = want.exempt.clone();
                if have != want {
                    errs.push(whole_spec_invalid(format!(
                        "spec of '{pl_name}' except the 'spec.exempt' field must equal the fixed value"
                    )));
                }
            } else if spec != want {
                errs.push(whole_spec_invalid(format!(
                    "spec of '{pl_name}' must equal the fixed value"
                )));
            }
        }
        let conditions = self.status.as_ref().and_then(|s| s.conditions.as_deref());
        let types = conditions.into_iter().flatten().map(|c| c.type_.as_deref());
        validate_condition_types(types, errs);
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(priority_level_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Defaults (upstream's flowcontrol/v1 defaults.go).

fn default_flow_schema_spec(spec: &mut FlowSchemaSpec) {
    if spec.matching_precedence.unwrap_or(0) == 0 {
        spec.matching_precedence = Some(1000);
    }
}

fn default_priority_level_spec(spec: &mut PriorityLevelConfigurationSpec) {
    if let Some(exempt) = spec.exempt.as_mut() {
        exempt.nominal_concurrency_shares.get_or_insert(0);
        exempt.lendable_percent.get_or_insert(0);
    }
    if let Some(limited) = spec.limited.as_mut() {
        limited.nominal_concurrency_shares.get_or_insert(30);
        limited.lendable_percent.get_or_insert(0);
        let queuing = limited
            .limit_response
            .as_mut()
            .and_then(|r| r.queuing.as_mut());
        if let Some(q) = queuing {
            for (field, default) in [
                (&mut q.hand_size, 8),
                (&mut q.queues, 64),
                (&mut q.queue_length_limit, 50),
            ] {
                if field.unwrap_or(0) == 0 {
                    *field = Some(default);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The mandatory objects (upstream's apiserver/pkg/apis/flowcontrol/bootstrap/default.go).

/// The FlowSchemas and PriorityLevelConfigurations every server must have, as upstream defines
/// them: `exempt` (the `system:masters` group, never limited) and `catch-all` (everything else
/// that no other schema matches, with a small share of concurrency), each marked for the
/// server to keep up to date.
pub fn bootstrap() -> (Vec<FlowSchema>, Vec<PriorityLevelConfiguration>) {
    let everything = PolicyRulesWithSubjects {
        subjects: Vec::new(),
        resource_rules: Some(vec![ResourcePolicyRule {
            verbs: vec!["*".into()],
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            namespaces: Some(vec!["*".into()]),
            cluster_scope: Some(true),
        }]),
        non_resource_rules: Some(vec![NonResourcePolicyRule {
            verbs: vec!["*".into()],
            non_resource_urls: vec!["*".into()],
        }]),
    };
    let groups = |names: &[&str]| -> Vec<Subject> {
        names
            .iter()
            .map(|n| Subject {
                kind: "Group".into(),
                group: Some(GroupSubject {
                    name: n.to_string(),
                }),
                ..Default::default()
            })
            .collect()
    };
    let flow_schema =
        |name: &str, pl: &str, precedence: i32, method: Option<&str>, subjects| FlowSchema {
            metadata: auto_update_meta(name),
            spec: Some(FlowSchemaSpec {
                priority_level_configuration: PriorityLevelConfigurationReference {
                    name: pl.into(),
                },
                matching_precedence: Some(precedence),
                distinguisher_method: method.map(|m| FlowDistinguisherMethod { type_: m.into() }),
                rules: Some(vec![PolicyRulesWithSubjects {
                    subjects,
                    ..everything.clone()
                }]),
            }),
            status: None,
        };
    let flow_schemas = vec![
        flow_schema(EXEMPT, EXEMPT, 1, None, groups(&["system:masters"])),
        flow_schema(
            CATCH_ALL,
            CATCH_ALL,
            MAX_MATCHING_PRECEDENCE,
            Some("ByUser"),
            groups(&["system:unauthenticated", "system:authenticated"]),
        ),
    ];
    let priority_levels = vec![
        PriorityLevelConfiguration {
            metadata: auto_update_meta(EXEMPT),
            spec: Some(PriorityLevelConfigurationSpec {
                type_: "Exempt".into(),
                exempt: Some(ExemptPriorityLevelConfiguration {
                    nominal_concurrency_shares: Some(0),
                    lendable_percent: Some(0),
                }),
                limited: None,
            }),
            status: None,
        },
        PriorityLevelConfiguration {
            metadata: auto_update_meta(CATCH_ALL),
            spec: Some(PriorityLevelConfigurationSpec {
                type_: "Limited".into(),
                limited: Some(LimitedPriorityLevelConfiguration {
                    nominal_concurrency_shares: Some(5),
                    lendable_percent: Some(0),
                    limit_response: Some(LimitResponse {
                        type_: "Reject".into(),
                        queuing: None,
                    }),
                    borrowing_limit_percent: None,
                }),
                exempt: None,
            }),
            status: None,
        },
    ];
    (flow_schemas, priority_levels)
}

fn auto_update_meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        annotations: Some(BTreeMap::from([(
            AUTO_UPDATE_ANNOTATION.to_string(),
            "true".to_string(),
        )])),
        ..Default::default()
    }
}

/// The mandatory objects as stored: defaulted, as what they are compared with is.
fn mandatory() -> (Vec<FlowSchema>, Vec<PriorityLevelConfiguration>) {
    let (mut flow_schemas, mut priority_levels) = bootstrap();
    flow_schemas.iter_mut().for_each(Kind::default_fields);
    priority_levels.iter_mut().for_each(Kind::default_fields);
    (flow_schemas, priority_levels)
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const FLOW_SCHEMA_COLUMNS: &[Column] = &[
    NAME,
    string("PriorityLevel", doc::PRIORITY_LEVEL_REFERENCE_NAME),
    string("MatchingPrecedence", doc::FLOW_SCHEMA_MATCHING_PRECEDENCE),
    string("DistinguisherMethod", doc::FLOW_SCHEMA_DISTINGUISHER_METHOD),
    AGE,
    string(
        "MissingPL",
        "references a broken or non-existent PriorityLevelConfiguration",
    ),
];

const PRIORITY_LEVEL_COLUMNS: &[Column] = &[
    NAME,
    string("Type", doc::PRIORITY_LEVEL_TYPE),
    string(
        "NominalConcurrencyShares",
        doc::LIMITED_NOMINAL_CONCURRENCY_SHARES,
    ),
    string("Queues", doc::QUEUING_QUEUES),
    string("HandSize", doc::QUEUING_HAND_SIZE),
    string("QueueLengthLimit", doc::QUEUING_QUEUE_LENGTH_LIMIT),
    AGE,
];

fn flow_schema_cells(fs: &FlowSchema, now: Timestamp) -> Vec<Value> {
    let spec = fs.spec.clone().unwrap_or_default();
    let method = spec
        .distinguisher_method
        .map_or_else(|| "<none>".to_string(), |m| m.type_);
    // Whether the referenced priority level is missing, as the apf controller reports it.
    let dangling = fs
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_.as_deref() == Some("Dangling"))
        .map_or("?", |c| c.status.as_deref().unwrap_or(""));
    vec![
        name(&fs.metadata),
        text(spec.priority_level_configuration.name),
        num(spec.matching_precedence.unwrap_or(0)),
        text(method),
        age(&fs.metadata, now),
        text(dangling),
    ]
}

fn priority_level_cells(pl: &PriorityLevelConfiguration, now: Timestamp) -> Vec<Value> {
    let spec = pl.spec.clone().unwrap_or_default();
    let none = || text("<none>");
    let (mut ncs, mut queues, mut hand_size, mut queue_length_limit) =
        (none(), none(), none(), none());
    if let Some(limited) = &spec.limited {
        ncs = num(limited.nominal_concurrency_shares.unwrap_or(0));
        if let Some(q) = limited
            .limit_response
            .as_ref()
            .and_then(|r| r.queuing.as_ref())
        {
            queues = num(q.queues.unwrap_or(0));
            hand_size = num(q.hand_size.unwrap_or(0));
            queue_length_limit = num(q.queue_length_limit.unwrap_or(0));
        }
    }
    vec![
        name(&pl.metadata),
        text(spec.type_),
        ncs,
        queues,
        hand_size,
        queue_length_limit,
        age(&pl.metadata, now),
    ]
}

mod doc {
    pub const PRIORITY_LEVEL_REFERENCE_NAME: &str =
        "`name` is the name of the priority level configuration being referenced Required.";
    pub const FLOW_SCHEMA_MATCHING_PRECEDENCE: &str = "`matchingPrecedence` is used to choose among the FlowSchemas that match a given request. The chosen FlowSchema is among those with the numerically lowest (which we take to be logically highest) MatchingPrecedence.  Each MatchingPrecedence value must be ranged in [1,10000]. Note that if the precedence is not specified, it will be set to 1000 as default.";
    pub const FLOW_SCHEMA_DISTINGUISHER_METHOD: &str = "`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this schema. `nil` specifies that the distinguisher is disabled and thus will always be the empty string.";
    pub const PRIORITY_LEVEL_TYPE: &str = "`type` indicates whether this priority level is subject to limitation on request execution.  A value of `\"Exempt\"` means that requests of this priority level are not subject to a limit (and thus are never queued) and do not detract from the capacity made available to other priority levels.  A value of `\"Limited\"` means that (a) requests of this priority level _are_ subject to limits and (b) some of the server's limited capacity is made available exclusively to this priority level. Required.";
    pub const LIMITED_NOMINAL_CONCURRENCY_SHARES: &str = "`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit (NominalCL) of this level. This is the number of execution seats available at this priority level. This is used both for requests dispatched from this priority level as well as requests dispatched from other priority levels borrowing seats from this level. The server's concurrency limit (ServerCL) is divided among the Limited priority levels in proportion to their NCS values:\n\nNominalCL(i)  = ceil( ServerCL * NCS(i) / sum_ncs ) sum_ncs = sum[priority level k] NCS(k)\n\nBigger numbers mean a larger nominal concurrency limit, at the expense of every other priority level.\n\nIf not specified, this field defaults to a value of 30.\n\nSetting this field to zero supports the construction of a \"jail\" for this priority level that is used to hold some request(s)";
    pub const QUEUING_QUEUES: &str = "`queues` is the number of queues for this priority level. The queues exist independently at each apiserver. The value must be positive.  Setting it to 1 effectively precludes shufflesharding and thus makes the distinguisher method of associated flow schemas irrelevant.  This field has a default value of 64.";
    pub const QUEUING_HAND_SIZE: &str = "`handSize` is a small positive number that configures the shuffle sharding of requests into queues.  When enqueuing a request at this priority level the request's flow identifier (a string pair) is hashed and the hash value is used to shuffle the list of queues and deal a hand of the size specified here.  The request is put into one of the shortest queues in that hand. `handSize` must be no larger than `queues`, and should be significantly smaller (so that a few heavy flows do not saturate most of the queues).  See the user-facing documentation for more extensive guidance on setting this field.  This field has a default value of 8.";
    pub const QUEUING_QUEUE_LENGTH_LIMIT: &str = "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of this priority level at a time; excess requests are rejected.  This value must be positive.  If not specified, it will be defaulted to 50.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    fn flow_schema(name: &str, spec: Value) -> FlowSchema {
        let mut fs: FlowSchema =
            serde_json::from_value(json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema", "metadata": {"name": name}, "spec": spec}))
            .unwrap();
        fs.default_fields();
        fs
    }

    fn priority_level(name: &str, spec: Value) -> PriorityLevelConfiguration {
        let mut pl: PriorityLevelConfiguration =
            serde_json::from_value(json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration", "metadata": {"name": name}, "spec": spec}))
            .unwrap();
        pl.default_fields();
        pl
    }

    fn errors<K: Kind>(obj: &K) -> Vec<String> {
        let mut errs = Vec::new();
        obj.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    fn rule() -> Value {
        json!({"subjects": [{"kind": "User", "user": {"name": "noxu"}}],
               "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"]}]})
    }

    #[test]
    fn defaults_as_upstream() {
        let fs = flow_schema("fs", json!({"priorityLevelConfiguration": {"name": "pl"}}));
        assert_eq!(fs.spec.unwrap().matching_precedence, Some(1000));
        let pl = priority_level(
            "pl",
            json!({"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {}}}}),
        );
        assert_eq!(
            serde_json::to_value(pl.spec.unwrap()).unwrap(),
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 30, "lendablePercent": 0,
                   "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}}})
        );
        let pl = priority_level("exempt", json!({"type": "Exempt", "exempt": {}}));
        assert_eq!(
            serde_json::to_value(pl.spec.unwrap()).unwrap(),
            json!({"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}})
        );
    }

    #[test]
    fn flow_schema_validation() {
        let ok = flow_schema(
            "fs",
            json!({"matchingPrecedence": 50, "priorityLevelConfiguration": {"name": "pl"}, "rules": [rule()]}),
        );
        assert!(errors(&ok).is_empty(), "{:?}", errors(&ok));
        let bad = flow_schema(
            "fs",
            json!({"matchingPrecedence": 10001, "priorityLevelConfiguration": {"name": ""},
                   "distinguisherMethod": {"type": "ByColor"},
                   "rules": [{"subjects": [{"kind": "Robot"}, {"kind": "ServiceAccount", "user": {"name": "x"},
                                            "serviceAccount": {"name": "default"}}],
                              "resourceRules": [{"verbs": ["get", "poke"], "apiGroups": ["*", "apps"], "resources": [],
                                                 "namespaces": ["-x"]}],
                              "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["healthz", "/a/*/b"]}]},
                             {"subjects": [{"kind": "Group", "group": {"name": "g"}}]}]}),
        );
        assert_eq!(
            errors(&bad),
            [
                "spec.matchingPrecedence: Invalid value: 10001: must not be greater than 10000",
                "spec.distinguisherMethod.type: Unsupported value: flowcontrol.FlowDistinguisherMethod{Type:\"ByColor\"}: supported values: \"ByNamespace\", \"ByUser\"",
                "spec.priorityLevelConfiguration.name: Required value: must reference a priority level",
                "spec.rules[0].subjects[0].kind: Unsupported value: \"Robot\": supported values: \"Group\", \"ServiceAccount\", \"User\"",
                "spec.rules[0].subjects[1].serviceAccount.namespace: Required value: must specify namespace for service account",
                "spec.rules[0].subjects[1].user: Forbidden: user is forbidden when subject kind is not 'User'",
                "spec.rules[0].resourceRules[0].verbs: Unsupported value: []string{\"get\", \"poke\"}: supported values: \"create\", \"delete\", \"deletecollection\", \"get\", \"list\", \"patch\", \"proxy\", \"update\", \"watch\"",
                "spec.rules[0].resourceRules[0].apiGroups: Invalid value: []string{\"*\", \"apps\"}: if '*' is present, must not specify other api groups",
                "spec.rules[0].resourceRules[0].resources: Required value: resource rules must supply at least one resource",
                "spec.rules[0].resourceRules[0].namespaces[0]: Invalid value: \"-x\": each member of this list must be '*' or a DNS-1123 label; a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[0]: Invalid value: \"healthz\": must start with slash",
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[1]: Invalid value: \"/a/*/b\": wildcard can only do suffix matching",
                "spec.rules[1]: Required value: at least one of resourceRules and nonResourceRules has to be non-empty",
            ]
        );
        let first = flow_schema(
            "fs",
            json!({"matchingPrecedence": 1, "priorityLevelConfiguration": {"name": "pl"}}),
        );
        assert_eq!(
            errors(&first),
            [
                "spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1"
            ]
        );
    }

    #[test]
    fn priority_level_validation() {
        let queue = |q: Value| {
            errors(&priority_level(
                "pl",
                json!({"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": q}}}),
            ))
        };
        assert!(queue(json!({})).is_empty());
        assert_eq!(
            queue(json!({"queues": 4, "handSize": 5, "queueLengthLimit": -1})),
            [
                "spec.limited.limitResponse.queuing.queueLengthLimit: Invalid value: -1: must be positive",
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 5: should not be greater than queues (4)",
            ]
        );
        assert_eq!(
            queue(json!({"queues": 1000000, "handSize": 6})),
            [
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 6: required entropy bits of deckSize 1000000 and handSize 6 should not be greater than 60"
            ]
        );
        assert_eq!(
            errors(&priority_level(
                "pl",
                json!({"type": "Limited", "exempt": {}, "limited": {"nominalConcurrencyShares": -1, "lendablePercent": 101,
                       "limitResponse": {"type": "Reject", "queuing": {}}}}),
            )),
            [
                "spec.exempt: Forbidden: must be nil if the type is Limited",
                "spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
                "spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited",
                "spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive",
            ]
        );
        assert_eq!(
            errors(&priority_level("pl", json!({"type": "Exempt"}))),
            [
                "spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'"
            ]
        );
        assert_eq!(
            errors(&priority_level("pl", json!({"type": "Limited"}))),
            ["spec.limited: Required value: must not be empty when type is Limited"]
        );
    }

    #[test]
    fn mandatory_objects() {
        let (flow_schemas, priority_levels) = bootstrap();
        assert_eq!(flow_schemas.len(), 2);
        assert_eq!(priority_levels.len(), 2);
        for mut fs in flow_schemas {
            fs.default_fields();
            assert!(errors(&fs).is_empty(), "{:?}", errors(&fs));
            assert_eq!(
                fs.metadata.annotations.as_ref().unwrap()["apf.kubernetes.io/autoupdate-spec"],
                "true"
            );
        }
        for mut pl in priority_levels {
            pl.default_fields();
            assert!(errors(&pl).is_empty(), "{:?}", errors(&pl));
        }
        let changed = priority_level(
            "catch-all",
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 50, "limitResponse": {"type": "Reject"}}}),
        );
        assert_eq!(
            errors(&changed),
            ["spec: Invalid value: spec of 'catch-all' must equal the fixed value"]
        );
        // The exempt level's exempt settings may be tuned; nothing else.
        let tuned = priority_level(
            "exempt",
            json!({"type": "Exempt", "exempt": {"nominalConcurrencyShares": 10, "lendablePercent": 20}}),
        );
        assert!(errors(&tuned).is_empty());
        let exempt = flow_schema(
            "exempt",
            json!({"matchingPrecedence": 1, "priorityLevelConfiguration": {"name": "exempt"}, "rules": [rule()]}),
        );
        assert_eq!(
            errors(&exempt),
            ["spec: Invalid value: spec of 'exempt' must equal the fixed value"]
        );
    }

    #[test]
    fn flowcontrol_rows() {
        let (flow_schemas, priority_levels) = bootstrap();
        let mut catch_all = serde_json::to_value(&flow_schemas[1]).unwrap();
        catch_all["metadata"]["creationTimestamp"] = json!(ago(7200));
        catch_all["status"] = json!({"conditions": [{"type": "Dangling", "status": "False"}]});
        assert_eq!(
            row_of::<FlowSchema>(catch_all),
            vec![
                json!("catch-all"),
                json!("catch-all"),
                json!(10000),
                json!("ByUser"),
                json!("120m"),
                json!("False")
            ]
        );
        let exempt = serde_json::to_value(&flow_schemas[0]).unwrap();
        assert_eq!(
            row_of::<FlowSchema>(exempt)[3..],
            [json!("<none>"), json!("<unknown>"), json!("?")]
        );

        let exempt = serde_json::to_value(&priority_levels[0]).unwrap();
        assert_eq!(
            row_of::<PriorityLevelConfiguration>(exempt),
            vec![
                json!("exempt"),
                json!("Exempt"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
                json!("<unknown>")
            ]
        );
        let queued = priority_level(
            "workload-low",
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 100,
                   "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 6}}}}),
        );
        let cells = row_of::<PriorityLevelConfiguration>(serde_json::to_value(queued).unwrap());
        assert_eq!(
            cells[1..6],
            [
                json!("Limited"),
                json!(100),
                json!(128),
                json!(6),
                json!(50)
            ]
        );
    }
}
