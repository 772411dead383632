//! Ownership helpers (being written).
