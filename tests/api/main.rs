//! Integration tests: the real GraphQL API over HTTP against a real database, one fresh
//! database per test so they run in parallel. See `helpers.rs` for the backend choice.

mod booking;
mod helpers;
mod http;
mod queries;
mod races;
mod roles;
mod schedules;
mod schema;
