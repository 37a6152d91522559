//! Patch semantics every kind shares, without I/O: the type information both need
//! ([`schema`]), strategic merge patch ([`strategic`]), and server-side apply with
//! `metadata.managedFields` ([`fieldpath`], [`typed`], [`managed`]), as upstream's
//! `strategicpatch`, structured-merge-diff and `managedfields` packages define them.

pub mod fieldpath;
pub mod gozero;
pub mod managed;
pub mod schema;
pub mod strategic;
pub mod typed;
