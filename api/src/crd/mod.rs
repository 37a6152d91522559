//! Custom resources, as upstream's apiextensions-apiserver serves them, without I/O: the
//! object type, structural schemas (validation, defaulting, pruning), the simple JSONPath of
//! printer columns and scale paths, Table columns, the strategy of one served version, and the
//! naming and condition rules of the CRD controllers.

pub mod cel;
pub mod jsonpath;
pub mod names;
pub mod object;
pub mod printer;
pub mod schema;
pub mod strategy;
pub mod structural;
pub mod validate;
pub mod version;

pub use object::CustomObject;
pub use printer::Columns;
pub use strategy::CustomStrategy;
