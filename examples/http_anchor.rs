//! The HTTP limit of a cached slot list on this machine: a minimal server on the service's own
//! stack (tokio, hyper through axum, mimalloc) that answers every `POST /graphql` with one fixed
//! body of a slot list's size, doing nothing else. Driven by the same load as the service (the
//! peers' `wrk/ours_slot_list.lua`), its requests per second are what the service's cached slot
//! lists are measured against (BENCHMARKS.md, "The HTTP anchor").
//!
//! ```sh
//! cargo build --release --example http_anchor
//! target/release/examples/http_anchor 127.0.0.1:5680 [BODY_FILE]
//! ```
//!
//! Without `BODY_FILE` the body is a day of 40 slots in the exact shape the service answers
//! `availableSlots { id startAt available }` with (ids and times of the benchmark's size).

use std::{net::SocketAddr, sync::Arc};

use axum::{
    body::Bytes,
    http::{header, HeaderValue},
    response::IntoResponse,
    routing::post,
    Router,
};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A day of 40 fifteen-minute slots from 08:00 UTC, as the service writes it.
fn slot_list() -> String {
    let slots: Vec<String> = (0..40)
        .map(|i| {
            let minutes = 8 * 60 + i * 15;
            format!(
                r#"{{"id":"{}","startAt":"2030-01-10T{:02}:{:02}:00+00:00","available":1}}"#,
                1_000_000 + i,
                minutes / 60,
                minutes % 60
            )
        })
        .collect();
    format!(r#"{{"data":{{"availableSlots":[{}]}}}}"#, slots.join(","))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args.next().unwrap_or_else(|| "127.0.0.1:5680".into()).parse()?;
    let body = match args.next() {
        Some(path) => std::fs::read_to_string(path)?,
        None => slot_list(),
    };
    let body = Arc::new(Bytes::from(body));
    println!("answering {} bytes on http://{addr}/graphql", body.len());
    let app = Router::new().route(
        "/graphql",
        post(move |_: Bytes| {
            let body = Bytes::clone(&body);
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/graphql-response+json; charset=utf-8"),
                    )],
                    body,
                )
                    .into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
