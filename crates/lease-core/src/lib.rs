//! lease-core (work in progress)
#![forbid(unsafe_code)]

pub mod ownership;
