//! Integration tests: the real GraphQL API over HTTP against a real database, one fresh
//! database per test so they run in parallel. See `helpers.rs` for the backend choice.

// A failed unwrap is a failed test, with the value in the message: exactly what a test wants.
#![allow(clippy::unwrap_used)]

mod booking;
mod burst;
mod direct;
mod fhir;
mod helpers;
mod http;
mod queries;
mod races;
mod roles;
mod schedules;
mod schema;
mod subscriptions;
