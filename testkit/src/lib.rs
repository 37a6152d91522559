//! Test helpers (dev-dependency only).
