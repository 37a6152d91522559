//! Authorization, as kube-apiserver's `--authorization-mode` chain: members of
//! `system:masters` may do anything; then each mode in order allows, denies, or has no
//! opinion, and a request no mode allowed is forbidden with upstream's message. The modes:
//! `Node` (kubelets, [`node`]), `RBAC` ([`rbac`]), `AlwaysAllow`, `AlwaysDeny`.

pub mod cache;
pub mod escalation;
pub mod node;
pub mod rbac;

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::PolicyRule;
use minik8s_api::rbac::Attributes;

use crate::storage::DynStore;

/// The group whose members every request is allowed for (upstream's privileged group).
pub const MASTERS: &str = "system:masters";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    AlwaysDeny,
    Node,
    Rbac,
}

impl Mode {
    pub fn parse(text: &str) -> Result<Mode, String> {
        match text {
            "AlwaysAllow" => Ok(Mode::AlwaysAllow),
            "AlwaysDeny" => Ok(Mode::AlwaysDeny),
            "Node" => Ok(Mode::Node),
            "RBAC" => Ok(Mode::Rbac),
            other => Err(format!(
                "authorization mode {other:?} is not supported: use AlwaysAllow, AlwaysDeny, Node or RBAC"
            )),
        }
    }
}

/// What one authorizer says of a request, with its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(String),
    NoOpinion(String),
}

/// The chain of authorizers.
#[derive(Debug)]
pub struct Authorizer {
    modes: Vec<Mode>,
    rbac: Option<Rbac>,
    node: Option<node::NodeAuthorizer>,
}

use rbac::Rbac;

impl Authorizer {
    /// The chain of `modes`, with the caches they read following `store`.
    pub fn start(store: &DynStore, modes: &[Mode]) -> Authorizer {
        let wants_rbac = modes.iter().any(|m| matches!(m, Mode::Rbac | Mode::Node));
        Authorizer {
            modes: modes.to_vec(),
            rbac: wants_rbac.then(|| Rbac::start(store)),
            node: modes
                .contains(&Mode::Node)
                .then(|| node::NodeAuthorizer::start(store)),
        }
    }

    /// Allows everything (no RBAC caches): tests and `--authorization-mode=AlwaysAllow`.
    pub fn always_allow() -> Authorizer {
        Authorizer {
            modes: vec![Mode::AlwaysAllow],
            rbac: None,
            node: None,
        }
    }

    /// Whether the caches the chain reads have listed once (readyz).
    pub fn synced(&self) -> bool {
        self.rbac.as_ref().is_none_or(Rbac::synced)
            && self.node.as_ref().is_none_or(node::NodeAuthorizer::synced)
    }

    /// Whether the chain enforces RBAC (escalation checks apply).
    pub fn rbac_enabled(&self) -> bool {
        self.modes.contains(&Mode::Rbac)
    }

    /// The chain's decision: `Allow`, or `Deny`/`NoOpinion` with the reason to give.
    pub fn authorize(&self, a: &Attributes) -> Decision {
        if a.groups.iter().any(|g| g == MASTERS) {
            return Decision::Allow;
        }
        let mut reasons = Vec::new();
        for mode in &self.modes {
            let decision = match mode {
                Mode::AlwaysAllow => Decision::Allow,
                Mode::AlwaysDeny => Decision::Deny("Everything is forbidden.".into()),
                Mode::Rbac => match &self.rbac {
                    Some(r) if r.allows(a) => Decision::Allow,
                    _ => Decision::NoOpinion(String::new()),
                },
                Mode::Node => match (&self.node, &self.rbac) {
                    (Some(n), Some(r)) => n.decide(a, r),
                    _ => Decision::NoOpinion(String::new()),
                },
            };
            match decision {
                Decision::Allow => return Decision::Allow,
                Decision::Deny(why) => return Decision::Deny(why),
                Decision::NoOpinion(why) if !why.is_empty() => reasons.push(why),
                Decision::NoOpinion(_) => {}
            }
        }
        Decision::NoOpinion(reasons.join(", "))
    }

    /// The rules a binding's role reference grants in `namespace`; `None` when the role
    /// does not exist (or there is no RBAC).
    pub fn role_ref_rules(
        &self,
        role: &k8s_openapi::api::rbac::v1::RoleRef,
        namespace: &str,
    ) -> Option<Vec<PolicyRule>> {
        Some(
            self.rbac
                .as_ref()?
                .find_role_rules(role, namespace)?
                .to_vec(),
        )
    }

    pub fn allows(&self, a: &Attributes) -> bool {
        self.authorize(a) == Decision::Allow
    }

    /// The rules the user has in `namespace` (RBAC's, and a kubelet's node rules), and
    /// whether that list is complete (false when a mode allows more than rules say).
    pub fn rules_for(
        &self,
        user: &str,
        groups: &[String],
        namespace: &str,
    ) -> (Vec<PolicyRule>, bool) {
        if groups.iter().any(|g| g == MASTERS) || self.modes.contains(&Mode::AlwaysAllow) {
            let all = minik8s_api::rbac::rule(&["*"], &["*"], &["*"]);
            let paths = minik8s_api::rbac::non_resource_rule(&["*"], &["*"]);
            return (vec![all, paths], true);
        }
        let Some(rbac) = &self.rbac else {
            return (Vec::new(), false);
        };
        let mut rules = rbac.rules_for(user, groups, namespace);
        let probe = Attributes {
            user: user.into(),
            groups: groups.to_vec(),
            ..Default::default()
        };
        let is_node = node::node_of(&probe).is_some() && self.modes.contains(&Mode::Node);
        if is_node {
            rules.extend_from_slice(&rbac.cluster_role_rules(node::NODE_ROLE));
        }
        // A kubelet's graph grants more than rules can say.
        (rules, !is_node)
    }
}

/// Upstream's message of a forbidden request, with the authorizers' reasons after it.
pub fn forbidden_reason(a: &Attributes, decision: &Decision) -> String {
    let message = minik8s_api::rbac::forbidden_message(a);
    match decision {
        Decision::Deny(why) | Decision::NoOpinion(why) if !why.is_empty() => {
            format!("{message}: {why}")
        }
        _ => message,
    }
}

/// The authorizer a server without one uses.
pub fn default_authorizer() -> Arc<Authorizer> {
    Arc::new(Authorizer::always_allow())
}
