//! The Amazon States Language (the language of AWS Step Functions), so a state machine
//! written for Step Functions runs here with its `Resource` naming a Function. This module
//! is pure: it reads and checks definitions and evaluates the language's data processing
//! (paths, templates, intrinsic functions, choice rules); running a definition is
//! [`super::engine`]'s, calling functions the controller's.

pub mod choice;
pub mod definition;
pub mod intrinsic;
mod parser;
pub mod path;
pub mod template;

pub use definition::{Problem, StateMachine};

/// The errors the language names (`States.*`).
pub mod errors {
    pub const ALL: &str = "States.ALL";
    pub const TASK_FAILED: &str = "States.TaskFailed";
    pub const TIMEOUT: &str = "States.Timeout";
    pub const RUNTIME: &str = "States.Runtime";
    pub const BRANCH_FAILED: &str = "States.BranchFailed";
    pub const NO_CHOICE_MATCHED: &str = "States.NoChoiceMatched";
    pub const INTRINSIC_FAILURE: &str = "States.IntrinsicFailure";
    pub const PARAMETER_PATH_FAILURE: &str = "States.ParameterPathFailure";
    pub const RESULT_PATH_MATCH_FAILURE: &str = "States.ResultPathMatchFailure";
    pub const PERMISSIONS: &str = "States.Permissions";
}

/// An error raised while a state machine runs: `Error` and `Cause` as the language names
/// them (what a Catch matches on, and what a failed run reports).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize, thiserror::Error)]
#[error("{error}: {cause}")]
pub struct Failure {
    pub error: String,
    pub cause: String,
}

impl Failure {
    pub fn new(error: impl Into<String>, cause: impl Into<String>) -> Failure {
        Failure {
            error: error.into(),
            cause: cause.into(),
        }
    }

    /// `States.Runtime` with `cause`.
    pub fn runtime(cause: impl Into<String>) -> Failure {
        Failure::new(errors::RUNTIME, cause)
    }
}
