//! `/healthz` (the process answers) and `/readyz` (its database, Redis if configured, and the
//! keys of each trusted identity provider).

use std::time::Duration;

use axum::{extract::State, http::StatusCode, response::IntoResponse, Json};
use serde_json::json;

use super::Shared;

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Always 200 while the process serves requests.
pub(super) async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// 503 when no primary database answers (on PostgreSQL: no answer, or a server in recovery or
/// read-only, as a demoted primary is); 200 `degraded` when only Redis is down, because
/// bookings never depend on Redis, or while a provider's keys cannot be fetched (its tokens
/// are refused, everyone else's are served).
pub(super) async fn readyz(State(state): Shared) -> impl IntoResponse {
    let db = state.service.db();
    let wait = db.unavailable_timeout().map_or(CHECK_TIMEOUT, |limit| limit.min(CHECK_TIMEOUT));
    let db = matches!(tokio::time::timeout(wait, db.check_primary()).await, Ok(Ok(())));
    let redis = match &state.redis {
        None => "not configured",
        Some(client) => match tokio::time::timeout(CHECK_TIMEOUT, ping_redis(client)).await {
            Ok(Ok(())) => "ok",
            _ => "down",
        },
    };
    let issuers = state.tokens.issuers();
    let unreachable = issuers.iter().any(|i| !i.reachable);
    let (code, status) = match (db, redis) {
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        (true, "down") => (StatusCode::OK, "degraded"),
        (true, _) if unreachable => (StatusCode::OK, "degraded"),
        (true, _) => (StatusCode::OK, "ok"),
    };
    let mut body = json!({ "status": status, "database": if db { "ok" } else { "down" }, "redis": redis });
    if !issuers.is_empty() {
        let states: serde_json::Map<String, serde_json::Value> =
            issuers.into_iter().map(|i| (i.issuer, json!(if i.reachable { "ok" } else { "unreachable" }))).collect();
        body["issuers"] = serde_json::Value::Object(states);
    }
    (code, Json(body))
}

async fn ping_redis(client: &redis::Client) -> redis::RedisResult<()> {
    let mut conn = client.get_multiplexed_async_connection().await?;
    redis::cmd("PING").query_async::<String>(&mut conn).await.map(drop)
}
