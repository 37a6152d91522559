//! The API's rules without any I/O: which resources exist, how their objects are defaulted
//! and validated, how selectors match, and how failures are reported. The apiserver serves
//! these rules; controllers and tests can use them without a server.

pub mod bootstrap_token;
pub mod conversion;
pub mod crd;
pub mod cron;
pub mod hollow;
pub mod kinds;
pub mod meta;
pub mod patch;
pub mod quantity;
pub mod rbac;
pub mod registry;
pub mod selector;
pub mod status;
pub mod strategy;
pub mod table;
pub mod validation;
pub mod volume;

pub use registry::ResourceInfo;
pub use status::{ApiError, Target};
pub use strategy::{BuiltIn, Kind, ScaleView, Strategy};
