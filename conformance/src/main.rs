//! Placeholder until the suite lands in this issue.
fn main() {}
