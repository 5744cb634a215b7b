//! Integration tests: the real GraphQL API over HTTP against a real database, one fresh
//! database per test so they run in parallel. See `backend.rs` for where the databases live.

// A failed unwrap is a failed test, with the value in the message: exactly what a test wants.
#![allow(clippy::unwrap_used)]

mod backend;
mod booking;
mod browser;
mod burst;
mod desk;
mod direct;
mod failover;
mod fhir;
mod fields;
mod find;
mod helpers;
mod hours;
mod http;
mod identity;
mod lifecycle;
mod messages;
mod queries;
mod races;
mod replays;
mod retention;
mod roles;
mod schedules;
mod schema;
mod seats;
mod servers;
mod subscriptions;
mod traces;
mod waitlist;
mod webhooks;
mod widget;
