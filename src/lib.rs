//! clinic-booking: a GraphQL service for medical appointment booking that never double-books.
//!
//! Patients, partners and admins book seats in doctors' time slots; every booking is one
//! conditional update plus an insert in one transaction, so the database itself guarantees
//! that no slot holds more bookings than its capacity, under any concurrency.
//!
//! # Layout
//!
//! - [`settings`] — the [`settings::Reader`] every module reads its environment variables
//!   with, and the one [`settings::ConfigError`] a bad value makes.
//! - [`config`] — [`config::Config`], the composition of the modules' settings: each module
//!   owns its variables, defaults and checks in a `Settings::from_env` beside the code they
//!   configure (`db/settings.rs`, `guard/settings.rs`, `http/settings.rs` with the CORS origins
//!   in `http/cors.rs`, `notify/settings.rs` with the SMTP and SMS URLs in
//!   `notify/transport.rs`, `fhir/settings.rs`, …); `config` adds only the rules that involve
//!   two modules, and tests that each variable is read once, named once and documented.
//! - [`startup`] — [`startup::Application::build`] wires the layers and binds the port.
//! - [`http`] — the router; GraphQL over HTTP and WebSocket, health, readiness, metrics.
//! - [`fhir`] — FHIR R4 beside GraphQL: reads, the slot search, `$hold`/`$book`, and the SMART
//!   Scheduling Links feed (kept rendered, refreshed by committed changes).
//! - [`graphql`] — schema, thin resolvers, output types separate from the entities, loaders,
//!   and the answer pipeline ([`graphql::answer`]): the one way an operation is answered over
//!   HTTP and WebSocket, with its fast paths as strategies chosen in one place.
//! - [`booking`] — the domain: schedules, booking, cancelling, visibility rules; it knows
//!   neither the transports above it nor which database runs below it.
//! - [`auth`] — bearer tokens and roles.
//! - [`error`] — the errors the services share ([`error::ServiceError`], [`error::Refusal`])
//!   and the value each is about, in the domain's words ([`error::Field`]); right above
//!   [`db`], whose failures they carry.
//! - [`db`] — connection pool, entities and every query (the only place with SQL), each call
//!   doing the right thing on PostgreSQL and on SQLite (e.g. [`db::seats::take`]).
//! - [`events`] — committed slot changes on their way to live subscribers, and the hook
//!   through which appointment events become durable follow-up work.
//! - [`notify`] — patients' contact details, and the emails and SMS each appointment event
//!   sends them (a durable queue in the database, sent by a worker in every instance).
//! - [`retention`] — the job that removes finished messages and webhook deliveries after
//!   `RETENTION_DAYS`.
//! - [`guard`] — burst protection: slot-list cache (shared rows), the generations that make
//!   what was made of a read stale, rate limit, known-full rejects, bulkhead.
//! - [`webhooks`] — partner webhooks: endpoints, deliveries recorded by the relay, signed
//!   and retried sending, the SSRF rule.
//! - [`telemetry`] — logging (each line of a request with its trace id) and OpenTelemetry traces
//!   (OTLP export, per-instance tracer providers, W3C trace context in and out).
//!
//! # Error policy
//!
//! Each layer has one error type: [`db::StoreError`] (always internal), and for the services
//! (`booking`, `notify`, `webhooks`) [`error::ServiceError`] (ends a request) and
//! [`error::Refusal`] (an expected "no", reported as data), both naming the value at fault as
//! an [`error::Field`], never as a transport's path. [`graphql::error`] maps them once:
//! refusals to `userErrors`, service errors to top-level errors with a stable
//! `extensions.code`, fields to their paths; internal details are logged, never sent.
//! [`fhir::outcome`] does the same for FHIR.

pub mod auth;
pub mod booking;
pub mod config;
pub mod db;
pub mod error;
pub mod events;
pub mod fhir;
pub mod graphql;
pub mod guard;
pub mod http;
pub mod model;
pub mod notify;
pub mod retention;
pub mod settings;
pub mod startup;
pub mod telemetry;
pub mod webhooks;
