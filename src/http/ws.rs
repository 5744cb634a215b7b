//! GraphQL over WebSocket at `/graphql/ws`: `graphql-transport-ws` and legacy `graphql-ws`,
//! with the bearer token in the `connection_init` payload.
//!
//! async-graphql runs the operations; this module guards the protocol around it, because
//! async-graphql 7.2 closes with generic codes (1002/1011) or not at all where the graphql-ws
//! protocol asks for specific ones. Every client message is inspected before async-graphql sees
//! it, and a violation closes the connection with the protocol's code:
//!
//! | code | when |
//! | --- | --- |
//! | 4400 | a message that is not valid JSON of the protocol |
//! | 4401 | `subscribe` before `connection_init` was acknowledged, or the token expired |
//! | 4403 | the token in `connection_init` is invalid |
//! | 4408 | no `connection_init` within `WS_INIT_TIMEOUT_MS` |
//! | 4409 | `subscribe` with the id of an operation still running |
//! | 4429 | a second `connection_init` |
//! | 1001 | the server is shutting down |
//! | 1000 | the operations ended (legacy `connection_terminate`) |
//!
//! A connection opened with a token is closed with 4401 when the token expires (its `exp` plus
//! the provider's leeway): the client opens a new one with a fresh token.
//!
//! A client's own close frame is echoed (with its code) before the server closes the TCP
//! connection, as RFC 6455 asks.
//!
//! The same codes apply to the legacy protocol. A `subscribe` beyond `WS_MAX_SUBSCRIPTIONS`
//! running operations is answered with an `error` message for that id (the connection stays).
//!
//! Browsers send a WebSocket handshake to any site with the user's cookies and without asking
//! the site first (no CORS preflight), so a handshake that carries `Origin` is answered 403
//! unless the origin is the server's own (its host and port are the request's `Host`: a page the
//! server served, such as GraphiQL) or one of `CORS_ALLOWED_ORIGINS`. Clients that are not
//! browsers send no `Origin` and are not affected.

use std::{
    collections::{HashSet, VecDeque},
    future::poll_fn,
    pin::Pin,
    str::FromStr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    task::{Context, Poll, Wake, Waker},
};

use async_graphql::{
    http::{ClientMessage, WebSocketProtocols, WsMessage},
    Data,
};
use axum::{
    extract::{
        ws::{CloseFrame, Message, WebSocket},
        State, WebSocketUpgrade,
    },
    http::{header, HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use futures_util::{task::AtomicWaker, SinkExt, StreamExt};
use serde_json::json;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{AppState, Shared};
use crate::{auth::Principal, graphql::RequestContext};

/// Close codes of the graphql-ws protocol (and one of RFC 6455).
mod code {
    pub(super) const NORMAL: u16 = 1000;
    pub(super) const GOING_AWAY: u16 = 1001;
    pub(super) const POLICY: u16 = 1008;
    pub(super) const BAD_MESSAGE: u16 = 4400;
    pub(super) const UNAUTHORIZED: u16 = 4401;
    pub(super) const FORBIDDEN: u16 = 4403;
    pub(super) const INIT_TIMEOUT: u16 = 4408;
    pub(super) const DUPLICATE_ID: u16 = 4409;
    pub(super) const TOO_MANY_INITS: u16 = 4429;
}

/// How async-graphql starts the messages the send loop looks at.
const COMPLETE: &str = r#"{"type":"complete""#;
const ACK: &str = r#"{"type":"connection_ack""#;

/// Longest wait for the closing handshake's frames to be written.
const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Initial read buffer of a connection; it grows for larger messages (up to the body limit).
const READ_BUFFER: usize = 4 * 1024;

/// Refusals of over-the-cap subscriptions waiting to be sent; more than this means the client
/// floods without reading, and the connection is closed.
const REPLY_QUEUE: usize = 64;

/// Upgrades the connection and serves GraphQL operations on it.
pub(super) async fn upgrade(State(state): Shared, uri: Uri, headers: HeaderMap, ws: WebSocketUpgrade) -> Response {
    if let Some(origin) = headers.get(header::ORIGIN) {
        // HTTP/2 carries the host in the URI (`:authority`), HTTP/1.1 in `Host`.
        let host =
            headers.get(header::HOST).and_then(|h| h.to_str().ok()).or_else(|| uri.authority().map(|a| a.as_str()));
        let allowed =
            origin.to_str().is_ok_and(|o| host.is_some_and(|h| is_own_origin(o, h)) || state.origins.allows(o));
        if !allowed {
            tracing::info!(origin = ?origin, "WebSocket handshake from a foreign origin refused");
            return (
                StatusCode::FORBIDDEN,
                "pages of this origin may not open WebSockets here (see CORS_ALLOWED_ORIGINS)",
            )
                .into_response();
        }
    }
    // Clients that can set headers (not browsers) may authenticate the handshake instead.
    let handshake_token =
        headers.get(header::AUTHORIZATION).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let Some(protocol) = negotiate(&headers) else {
        return (StatusCode::BAD_REQUEST, "use the sub-protocol graphql-transport-ws or graphql-ws").into_response();
    };
    let handshake = tracing::Span::current().context();
    ws.protocols([protocol.sec_websocket_protocol()])
        // Client messages are small; the default 128 KiB read buffer per connection would be
        // most of a subscriber's memory (tens of thousands of widgets stay connected).
        .read_buffer_size(READ_BUFFER)
        .max_message_size(state.limits.max_body_bytes)
        .max_frame_size(state.limits.max_body_bytes)
        .on_upgrade(move |socket| {
            // The connection's operations are spans of the handshake's trace (which continued
            // the caller's `traceparent`), under a span of the connection's own.
            let connection = tracing::info_span!("graphql_ws", otel.name = "GraphQL WebSocket", otel.kind = "server");
            let _ = connection.set_parent(handshake);
            serve(socket, state, protocol, handshake_token).instrument(connection)
        })
}

/// True when `origin` is the server's own: the same host and port as the request's `Host`
/// (whose port, when absent, is the default of the origin's scheme).
fn is_own_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else { return false };
    let default_port = match scheme {
        "http" => "80",
        "https" => "443",
        _ => return false,
    };
    let with_port = |authority: &str| {
        // A port is what follows the last `:`, unless that is inside an IPv6 address.
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
            && !authority.ends_with(']');
        if has_port {
            authority.to_ascii_lowercase()
        } else {
            format!("{}:{default_port}", authority.to_ascii_lowercase())
        }
    };
    !authority.is_empty() && with_port(authority) == with_port(host)
}

/// The first sub-protocol the client offers that we speak.
fn negotiate(headers: &HeaderMap) -> Option<WebSocketProtocols> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| WebSocketProtocols::from_str(p.trim()).ok())
}

/// What one connection has seen so far; shared by the inbound guard, the init callback and the
/// send loop (all on the connection's task, so the lock is never contended).
#[derive(Debug, Default)]
struct Conn {
    init_seen: bool,
    init_refused: bool,
    running: HashSet<String>,
    close: Option<(u16, String)>,
    /// The client sent its close frame: the server's only part left is the echo.
    peer_closed: bool,
    /// Answers of the guard itself (refused operations), sent before anything else.
    replies: VecDeque<String>,
}

/// The guard's decision about one client message.
enum Verdict {
    /// Hand it to async-graphql (boxed: a request is large, the other verdicts are not).
    Forward(Box<ClientMessage>),
    /// Answer it here and forget it.
    Reply(String),
    /// Close the connection.
    Close(u16, String),
}

impl Conn {
    fn inspect(&mut self, protocol: WebSocketProtocols, max_running: usize, raw: &[u8]) -> Verdict {
        let msg = match ClientMessage::from_bytes(raw) {
            Ok(msg) => msg,
            Err(e) => return Verdict::Close(code::BAD_MESSAGE, format!("Invalid message received: {e}")),
        };
        match &msg {
            ClientMessage::ConnectionInit { .. } if self.init_seen => {
                Verdict::Close(code::TOO_MANY_INITS, "Too many initialisation requests".into())
            }
            ClientMessage::ConnectionInit { .. } => {
                self.init_seen = true;
                Verdict::Forward(Box::new(msg))
            }
            ClientMessage::Start { .. } if !self.init_seen => Verdict::Close(code::UNAUTHORIZED, "Unauthorized".into()),
            ClientMessage::Start { id, .. } if self.running.contains(id) => {
                Verdict::Close(code::DUPLICATE_ID, format!("Subscriber for {id} already exists"))
            }
            ClientMessage::Start { id, .. } if self.running.len() >= max_running => {
                Verdict::Reply(too_many_operations(protocol, id, max_running))
            }
            ClientMessage::Start { id, .. } => {
                self.running.insert(id.clone());
                Verdict::Forward(Box::new(msg))
            }
            ClientMessage::Stop { id } => {
                self.running.remove(id);
                Verdict::Forward(Box::new(msg))
            }
            _ => Verdict::Forward(Box::new(msg)),
        }
    }

    /// Frees the id of an operation the server completed.
    fn note_sent(&mut self, text: &str) {
        // Serialized by async-graphql as `{"type":"complete","id":…}`; only those are parsed.
        if text.starts_with(COMPLETE) {
            if let Ok(done) = serde_json::from_str::<Completed>(text) {
                self.running.remove(&done.id);
            }
        }
    }
}

#[derive(serde::Deserialize)]
struct Completed {
    id: String,
}

/// The `error` message refusing an operation over the cap, in the protocol's shape.
fn too_many_operations(protocol: WebSocketProtocols, id: &str, max: usize) -> String {
    let error = json!({
        "message": format!("at most {max} operations may run on one connection"),
        "extensions": { "code": crate::graphql::error::code::BAD_REQUEST },
    });
    let payload = match protocol {
        WebSocketProtocols::GraphQLWS => json!([error]),
        WebSocketProtocols::SubscriptionsTransportWS => error,
    };
    json!({ "type": "error", "id": id, "payload": payload }).to_string()
}

fn lock(conn: &Mutex<Conn>) -> MutexGuard<'_, Conn> {
    conn.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts open connections in the `ws_connections_open` gauge.
struct OpenConnection;

impl OpenConnection {
    fn new() -> Self {
        metrics::gauge!("ws_connections_open").increment(1.0);
        Self
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics::gauge!("ws_connections_open").decrement(1.0);
    }
}

/// The read side of a socket, polled only after the socket woke the task. async-graphql polls
/// its input on every turn (twice per event sent), and polling the socket (lock, WebSocket
/// codec, readiness registration) costs far more than this flag: with thousands of
/// subscribers, that difference is a good part of the fan-out time.
struct Gated<S> {
    inner: S,
    gate: Arc<Gate>,
    waker: Waker,
}

/// Set by the socket's wake-ups; forwards them to the connection's task.
struct Gate {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<S> Gated<S> {
    fn new(inner: S) -> Self {
        // Starts open: the first poll registers the gate with the socket.
        let gate = Arc::new(Gate { woken: AtomicBool::new(true), task: AtomicWaker::new() });
        Self { inner, waker: Waker::from(Arc::clone(&gate)), gate }
    }
}

impl<S: futures_util::Stream + Unpin> futures_util::Stream for Gated<S> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = self.get_mut();
        this.gate.task.register(cx.waker());
        if !this.gate.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let polled = this.inner.poll_next_unpin(&mut Context::from_waker(&this.waker));
        if polled.is_ready() {
            // More may be buffered: look again next time.
            this.gate.woken.store(true, Ordering::Release);
        }
        polled
    }
}

/// Serves one connection until either side closes it or the instance stops.
async fn serve(socket: WebSocket, state: Arc<AppState>, protocol: WebSocketProtocols, handshake_token: Option<String>) {
    let _open = OpenConnection::new();
    let limits = state.limits;
    let conn = Arc::new(Mutex::new(Conn::default()));
    let (mut sink, stream) = socket.split();
    let stream = Gated::new(stream);

    let inbound = futures_util::stream::unfold((stream, Arc::clone(&conn)), move |(mut stream, conn)| {
        async move {
            loop {
                let raw = match stream.next().await? {
                    Ok(msg @ (Message::Text(_) | Message::Binary(_))) => msg.into_data(),
                    Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                    Ok(Message::Close(_)) => {
                        lock(&conn).peer_closed = true;
                        return None;
                    }
                    Err(_) => return None,
                };
                let verdict = lock(&conn).inspect(protocol, limits.ws_max_subscriptions, &raw);
                let (code, reason) = match verdict {
                    Verdict::Forward(msg) => return Some((Ok(*msg), (stream, conn))),
                    Verdict::Reply(text) => {
                        let queued = {
                            let mut c = lock(&conn);
                            c.replies.push_back(text);
                            c.replies.len()
                        };
                        if queued <= REPLY_QUEUE {
                            // Lets the send loop pick the reply up (this wakes the task).
                            tokio::task::yield_now().await;
                            continue;
                        }
                        (code::POLICY, "too many refused operations".to_owned())
                    }
                    Verdict::Close(code, reason) => (code, reason),
                };
                // Ending the stream ends async-graphql's; the send loop then closes with this code.
                lock(&conn).close = Some((code, reason));
                return None;
            }
        }
    });

    let tokens = Arc::clone(&state.tokens);
    let init_conn = Arc::clone(&conn);
    // When the token of `connection_init` stops being accepted (Unix seconds).
    let (expiry_tx, mut expiry_rx) = tokio::sync::watch::channel(None::<i64>);
    let mut session = Data::default();
    session.insert(state.subscriptions.live().clone());
    let operations =
        async_graphql::http::WebSocket::from_message_stream(state.subscriptions.clone(), inbound, protocol)
            .connection_data(session)
            .on_connection_init(move |payload| async move {
                let data = connection_data(&tokens, &payload, handshake_token.as_deref()).await;
                match &data {
                    Ok((_, expires_at)) => {
                        expiry_tx.send_replace(*expires_at);
                    }
                    Err(_) => lock(&init_conn).init_refused = true,
                }
                data.map(|(data, _)| data)
            });
    futures_util::pin_mut!(operations);

    let stopped = state.subscriptions.live().stopped();
    let init_deadline = tokio::time::sleep(limits.ws_init_timeout);
    futures_util::pin_mut!(stopped, init_deadline);
    let mut init_checked = false;
    let expiry = tokio::time::sleep(std::time::Duration::from_secs(365 * 24 * 3600));
    futures_util::pin_mut!(expiry);
    let mut expiry_armed = false;
    let close = loop {
        tokio::select! {
            biased;
            () = &mut stopped => break Some((code::GOING_AWAY, "server shutting down".to_owned())),
            () = &mut expiry, if expiry_armed => break Some((code::UNAUTHORIZED, "token expired".to_owned())),
            Ok(()) = expiry_rx.changed(), if !expiry_armed => {
                if let Some(at) = *expiry_rx.borrow() {
                    let left = at.saturating_sub(chrono::Utc::now().timestamp()).saturating_add(1);
                    let left = std::time::Duration::from_secs(u64::try_from(left).unwrap_or(0));
                    expiry.as_mut().reset(tokio::time::Instant::now() + left);
                    expiry_armed = true;
                }
            }
            () = &mut init_deadline, if !init_checked => {
                init_checked = true;
                if !lock(&conn).init_seen {
                    break Some((code::INIT_TIMEOUT, "Connection initialisation timeout".to_owned()));
                }
            }
            reply = poll_fn(|_| lock(&conn).replies.pop_front().map_or(Poll::Pending, Poll::Ready)) => {
                if sink.send(Message::Text(reply.into())).await.is_err() {
                    break None;
                }
            }
            item = operations.next() => match item {
                Some(WsMessage::Text(text)) => {
                    // Cheap prefix checks first: this runs for every event sent.
                    if text.starts_with(COMPLETE) {
                        lock(&conn).note_sent(&text);
                    } else if !init_checked && text.starts_with(ACK) {
                        // Acknowledged: the init timer has nothing left to watch.
                        init_checked = true;
                    }
                    if sink.send(Message::Text(text.into())).await.is_err() {
                        break None;
                    }
                }
                Some(WsMessage::Close(code, reason)) => break Some(refine(&conn, code, reason)),
                None => {
                    let mut c = lock(&conn);
                    // Legacy protocol: a refused init was answered with `connection_error` already.
                    break c.close.take().or_else(|| c.init_refused.then(|| (code::FORBIDDEN, "Forbidden".to_owned())));
                }
            }
        }
    };
    // The closing handshake (RFC 6455 §5.5.1). When the client closed, the WebSocket layer
    // queued the echo of its close frame as it read it, but writes it only on a later read or
    // write, and the guard reads no more: closing the sink writes it. Otherwise the server
    // closes: with its code, or 1000 when the operations simply ended (`connection_terminate`).
    // Dropping the socket afterwards closes the TCP connection, the server's part.
    let peer_closed = lock(&conn).peer_closed;
    let close = close.or_else(|| (!peer_closed).then(|| (code::NORMAL, String::new())));
    let handshake = async {
        if let Some((code, reason)) = close {
            let _ = sink.send(Message::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
        }
        let _ = sink.close().await;
    };
    // A client that stopped reading does not keep the connection open.
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, handshake).await;
}

/// async-graphql closes a refused `connection_init` with 1002; the protocol says 4403.
fn refine(conn: &Mutex<Conn>, code: u16, reason: String) -> (u16, String) {
    let mut c = lock(conn);
    if let Some(ours) = c.close.take() {
        return ours;
    }
    if c.init_refused {
        return (code::FORBIDDEN, format!("Forbidden: {reason}"));
    }
    (code, reason)
}

/// Authenticates a `connection_init` payload (`{"Authorization": "Bearer …"}`), or without a
/// token there the handshake's `Authorization` header; no token means anonymous, an invalid one
/// closes the connection. With the data, when the token stops being accepted.
async fn connection_data(
    tokens: &crate::auth::Authenticator,
    payload: &serde_json::Value,
    handshake_token: Option<&str>,
) -> async_graphql::Result<(Data, Option<i64>)> {
    // The init payload's token is the protocol's own place for it, so it wins over the handshake's.
    let header = ["Authorization", "authorization"]
        .iter()
        .find_map(|k| payload.get(*k))
        .or_else(|| payload.get("headers").and_then(|h| h.get("Authorization").or_else(|| h.get("authorization"))))
        .and_then(|v| v.as_str())
        .or(handshake_token);
    let principal = match header {
        None => Principal::Anonymous,
        Some(value) => crate::auth::principal_from_header(tokens, value).await.map_err(async_graphql::Error::new)?,
    };
    let expires_at = principal.caller().and_then(|c| c.expires_at);
    let mut data = Data::default();
    data.insert(RequestContext::new(principal, uuid::Uuid::new_v4().to_string()));
    Ok((data, expires_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `None` when forwarded; otherwise the close code (0 for a reply) and the text.
    fn inspect(conn: &mut Conn, raw: &str) -> Option<(u16, String)> {
        match conn.inspect(WebSocketProtocols::GraphQLWS, 2, raw.as_bytes()) {
            Verdict::Forward(_) => None,
            Verdict::Reply(text) => Some((0, text)),
            Verdict::Close(code, reason) => Some((code, reason)),
        }
    }

    fn close_code(conn: &mut Conn, raw: &str) -> Option<u16> {
        inspect(conn, raw).map(|(code, _)| code)
    }

    const SUB: &str = r#"{"type":"subscribe","id":"ID","payload":{"query":"subscription{__typename}"}}"#;

    #[test]
    fn own_origin_is_the_requests_host_and_port() {
        assert!(is_own_origin("http://127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(is_own_origin("https://Book.Example.com", "book.example.com"));
        assert!(is_own_origin("https://book.example.com", "book.example.com:443"));
        assert!(is_own_origin("http://[::1]:8080", "[::1]:8080"));
        assert!(is_own_origin("http://[::1]", "[::1]:80"));
        assert!(!is_own_origin("http://127.0.0.1:8081", "127.0.0.1:8080"));
        assert!(!is_own_origin("https://book.example.com", "book.example.com:80"));
        assert!(!is_own_origin("http://evil.example.com", "book.example.com"));
        assert!(!is_own_origin("null", "book.example.com"));
        assert!(!is_own_origin("http://", ":80"));
    }

    #[test]
    fn the_guard_enforces_the_protocol() {
        let mut c = Conn::default();
        let sub = |id: &str| SUB.replace("ID", id);
        assert_eq!(close_code(&mut c, "nope"), Some(code::BAD_MESSAGE));
        assert_eq!(close_code(&mut c, &sub("a")), Some(code::UNAUTHORIZED));
        assert_eq!(close_code(&mut c, r#"{"type":"connection_init"}"#), None);
        assert_eq!(close_code(&mut c, r#"{"type":"connection_init"}"#), Some(code::TOO_MANY_INITS));
        assert_eq!(close_code(&mut c, &sub("a")), None);
        assert_eq!(close_code(&mut c, &sub("a")), Some(code::DUPLICATE_ID));
        assert_eq!(close_code(&mut c, &sub("b")), None);
        let refusal = inspect(&mut c, &sub("c"));
        assert!(
            refusal.as_ref().is_some_and(|(zero, text)| *zero == 0
                && text.contains(r#""type":"error""#)
                && text.contains(r#""id":"c""#)),
            "{refusal:?}"
        );
        assert_eq!(close_code(&mut c, r#"{"type":"complete","id":"a"}"#), None);
        c.note_sent(r#"{"type":"complete","id":"b"}"#);
        assert_eq!(close_code(&mut c, &sub("a")), None);
        assert_eq!(close_code(&mut c, &sub("b")), None);
    }
}
