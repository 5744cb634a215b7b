//! GraphQL over WebSocket at `/graphql/ws`: `graphql-transport-ws` and legacy `graphql-ws`,
//! with the bearer token in the `connection_init` payload.

use async_graphql::Data;
use async_graphql_axum::{GraphQLProtocol, GraphQLWebSocket};
use axum::{
    extract::{State, WebSocketUpgrade},
    response::Response,
};

use super::AppState;
use crate::{auth::Principal, graphql::RequestContext};

/// Upgrades the connection and serves GraphQL operations on it.
pub(super) async fn upgrade(
    State(state): State<AppState>,
    protocol: GraphQLProtocol,
    ws: WebSocketUpgrade,
) -> Response {
    let schema = state.schema.clone();
    ws.protocols(async_graphql::http::ALL_WEBSOCKET_PROTOCOLS).on_upgrade(move |socket| async move {
        let tokens = state.tokens.clone();
        GraphQLWebSocket::new(socket, schema, protocol)
            .on_connection_init(move |payload| async move { connection_data(&tokens, &payload) })
            .serve()
            .await;
    })
}

/// Authenticates a `connection_init` payload (`{"Authorization": "Bearer …"}`); no token means
/// anonymous, an invalid one closes the connection.
fn connection_data(tokens: &crate::auth::TokenIssuer, payload: &serde_json::Value) -> async_graphql::Result<Data> {
    let header = ["Authorization", "authorization"]
        .iter()
        .find_map(|k| payload.get(*k))
        .or_else(|| payload.get("headers").and_then(|h| h.get("Authorization").or_else(|| h.get("authorization"))))
        .and_then(|v| v.as_str());
    let principal = match header {
        None => Principal::Anonymous,
        Some(value) => crate::auth::principal_from_header(tokens, value).map_err(async_graphql::Error::new)?,
    };
    let mut data = Data::default();
    data.insert(RequestContext { principal, request_id: uuid::Uuid::new_v4().to_string() });
    Ok(data)
}
