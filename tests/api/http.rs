//! GraphQL over HTTP: status codes and media types of the GraphQL-over-HTTP spec, request
//! limits, and bad input of every kind answered with a clear error, never a 5xx.

use serde_json::{json, Value};

use crate::helpers::*;

async fn raw(
    app: &TestApp,
    content_type: Option<&str>,
    accept: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (u16, String, Value) {
    let mut req = app.client.post(format!("{}/graphql", app.address)).body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let media = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, media, resp.json().await.unwrap_or(Value::Null))
}

fn code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn request_errors_are_400_without_data() {
    let (app, _db) = TestApp::spawn().await;
    let json_ct = Some("application/json");
    for body in [
        "{not json",
        "{}",
        r#"{"query": 42}"#,
        r#"{"query": "{doctors{edges{cursor}}}", "variables": [1]}"#,
        r#"{"query": "{doctors{edges{cursor}}}", "operationName": 5}"#,
        r#"{"query": "{doctors{edges{cursor}}}", "extensions": "x"}"#,
        r#"{"query": "{ doctors( "}"#,
        r#"{"query": "{ noSuchField }"}"#,
        r#"{"query": "query($d: Date!) { availableSlots(doctorId: \"1\", date: $d) { id } }"}"#,
        r#"[]"#,
        r#"42"#,
    ] {
        let (status, media, body) = raw(&app, json_ct, Some("application/graphql-response+json"), body).await;
        assert_eq!(status, 400, "{body}");
        assert!(media.starts_with("application/graphql-response+json"), "{media}");
        assert_eq!(code(&body), "BAD_REQUEST", "{body}");
        assert!(body.get("data").is_none(), "{body}");
    }
}

#[tokio::test]
async fn a_document_validated_before_still_refuses_bad_variables() {
    let (app, _db) = TestApp::spawn().await;
    let (_doctor, slot) = app.doctor_with_slot(5).await;
    let query = "mutation($s:ID!,$k:String!,$p:ID){bookAppointment(input:{slotId:$s,idempotencyKey:$k,patientId:$p}){replayed}}";
    let token = partner("p1");
    for n in 1..=2 {
        let (status, body) =
            app.post(Some(&token), query, json!({ "s": slot, "k": format!("k{n}"), "p": format!("{n}") })).await;
        assert_eq!((status, body["data"]["bookAppointment"]["replayed"].as_bool()), (200, Some(false)), "{body}");
    }
    for bad in [
        json!({ "s": slot, "k": "k3", "p": true }),
        json!({ "s": slot, "k": 3, "p": "3" }),
        json!({ "s": slot, "p": "3" }),
        json!({ "s": [slot], "k": "k3", "p": "3" }),
        json!({ "s": 1.5, "k": "k3", "p": "3" }),
    ] {
        let (status, body) = app.post(Some(&token), query, bad.clone()).await;
        assert_eq!((status, code(&body)), (400, "BAD_REQUEST"), "{bad}: {body}");
    }
    let (status, body) = app.post(Some(&token), query, json!({ "s": slot, "k": "k4", "p": "4" })).await;
    assert_eq!((status, body["data"]["bookAppointment"]["replayed"].as_bool()), (200, Some(false)), "{body}");
}

#[tokio::test]
async fn legacy_json_clients_get_200_for_document_errors() {
    let (app, _db) = TestApp::spawn().await;
    let accept = Some("application/json");
    let (status, media, body) = raw(&app, Some("application/json"), accept, r#"{"query":"{"}"#).await;
    assert_eq!((status, media.as_str(), code(&body)), (200, "application/json", "BAD_REQUEST"));
    let (status, _, body) = raw(&app, Some("application/json"), accept, "{not json").await;
    assert_eq!((status, code(&body)), (400, "BAD_REQUEST"));
}

#[tokio::test]
async fn media_types_follow_accept_and_content_type_is_required() {
    let (app, _db) = TestApp::spawn().await;
    let q = r#"{"query":"{doctors{edges{cursor}}}"}"#;
    let (status, media, _) = raw(&app, Some("application/json"), Some("application/json"), q).await;
    assert_eq!((status, media.as_str()), (200, "application/json"));
    let (status, media, _) = raw(&app, Some("application/json; charset=utf-8"), None, q).await;
    assert!(status == 200 && media.starts_with("application/graphql-response+json"));
    let (status, _, body) = raw(&app, Some("text/plain"), None, q).await;
    assert_eq!((status, code(&body)), (415, "BAD_REQUEST"));
    let (status, _, _) = raw(&app, None, None, q).await;
    assert_eq!(status, 415);
}

#[tokio::test]
async fn get_runs_queries_but_never_mutations() {
    let (app, _db) = TestApp::spawn().await;
    let url = format!("{}/graphql", app.address);
    let resp = app.client.get(&url).query(&[("query", "{doctors(first:1){edges{cursor}}}")]).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let resp = app
        .client
        .get(&url)
        .query(&[("query", "mutation{createDoctor(input:{name:\"x\"}){id}}")])
        .bearer_auth(admin())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "POST");
    let resp = app
        .client
        .get(&url)
        .query(&[("query", "query($f:Int){doctors(first:$f){edges{cursor}}}"), ("variables", "{\"f\":1}")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = app
        .client
        .get(&url)
        .query(&[("query", "{doctors{edges{cursor}}}"), ("variables", "{bad")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let page = app.client.get(&url).header("accept", "text/html").send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().to_lowercase().contains("graphiql"));
}

#[tokio::test]
async fn limits_on_body_depth_complexity_and_batches() {
    let (app, _db) = TestApp::spawn().await;
    let big = json!({ "query": format!("{{doctors{{edges{{cursor}}}}}} #{}", "x".repeat(300 * 1024)) }).to_string();
    let (status, _, body) = raw(&app, Some("application/json"), None, big).await;
    assert_eq!((status, code(&body)), (413, "BAD_REQUEST"));

    let mut deep = String::from("id");
    for _ in 0..10 {
        deep = format!("slot{{doctor{{slots(date:\"2030-01-01\"){{{deep}}}}}}}");
    }
    let (status, body) = app.post(None, &format!("{{slot(id:\"1\"){{{deep}}}}}"), json!({})).await;
    assert_eq!((status, code(&body)), (400, "BAD_REQUEST"), "{body}");

    let wide: String = (0..600).map(|i| format!("a{i}:slot(id:\"1\"){{id}} ")).collect();
    let (status, body) = app.post(None, &format!("{{{wide}}}"), json!({})).await;
    assert_eq!((status, code(&body)), (400, "BAD_REQUEST"), "{body}");

    let op = json!({ "query": "{doctors(first:1){edges{cursor}}}" });
    let (status, body) = app.post_raw(None, Value::Array(vec![op.clone(); 10])).await;
    assert_eq!(status, 200);
    assert_eq!(body.as_array().map(Vec::len), Some(10));
    let (status, body) = app.post_raw(None, Value::Array(vec![op; 11])).await;
    assert_eq!((status, code(&body)), (400, "BAD_REQUEST"));
}

#[tokio::test]
async fn malformed_ids_and_arguments_are_invalid_input() {
    let (app, _db) = TestApp::spawn().await;
    for q in [
        "{slot(id:\"abc\"){id}}",
        "{doctor(id:\"-1\"){id}}",
        "{appointment(id:\"1.5\"){id}}",
        "{availableSlots(doctorId:\"0\",date:\"2030-01-01\"){id}}",
        "{doctors(first:101){edges{cursor}}}",
        "{doctors(first:-1){edges{cursor}}}",
        "{doctors(after:\"not-a-cursor\"){edges{cursor}}}",
    ] {
        let (status, body) = app.post(Some(&admin()), q, json!({})).await;
        assert_eq!((status, code(&body)), (200, "INVALID_INPUT"), "{q}: {body}");
    }
    let bad_cancel = app.cancel(&patient(1), "zzz").await;
    assert_eq!(user_error(&bad_cancel), Some("INVALID_INPUT"));
    assert_eq!(user_error(&app.cancel(&patient(1), "424242").await), Some("APPOINTMENT_NOT_FOUND"));
    for bad_date in ["2030-13-01", "30-01-01", "2030/01/01"] {
        let (status, body) = app
            .post(None, "query($t:Date!){availableSlots(doctorId:\"1\",date:$t){id}}", json!({ "t": bad_date }))
            .await;
        assert!(status < 500 && code(&body) == "BAD_REQUEST", "{bad_date}: {status} {body}");
    }
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let (app, _db) = TestApp::spawn().await;
    let health = app.client.get(format!("{}/healthz", app.address)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = app.client.get(format!("{}/readyz", app.address)).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["database"], "ok");
    app.post(None, "{doctors{edges{cursor}}}", json!({})).await;
    let metrics = app.client.get(format!("{}/metrics", app.address)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("graphql_requests_total"), "{metrics}");
    assert!(metrics.contains("db_pool_in_use"));
}

#[tokio::test]
async fn request_ids_are_echoed() {
    let (app, _db) = TestApp::spawn().await;
    let resp = app
        .client
        .post(format!("{}/graphql", app.address))
        .header("x-request-id", "trace-me-1")
        .json(&json!({ "query": "{doctors{edges{cursor}}}" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"], "trace-me-1");
}

/// Writes `request` on a new connection and reads one answer: its status, its headers (names
/// in lower case) and whether the server then closed the connection.
async fn exchange(app: &TestApp, request: &[u8]) -> (u16, Vec<(String, String)>, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", app.port)).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let read = tokio::time::timeout(std::time::Duration::from_secs(15), stream.read(&mut buf)).await;
        let n = read.expect("an answer in time").unwrap();
        assert!(n > 0, "connection closed before an answer: {}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(received[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase()))
        .collect();
    // The body, then either the end of the connection or nothing more (kept alive).
    let closed = loop {
        match tokio::time::timeout(std::time::Duration::from_millis(500), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(_)) => continue,
            Err(_) => break false,
        }
    };
    (status, headers, closed)
}

fn says_close(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(k, v)| k == "connection" && v.split(',').any(|t| t.trim() == "close"))
}

#[tokio::test]
async fn answers_that_end_the_connection_say_connection_close() {
    let (app, _db) = TestApp::spawn().await;
    let limit = 256 * 1024;
    // A declared length over the limit is refused before any of the body is read (a client
    // waiting for 100-continue never sends it).
    let declared = format!(
        "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        limit + 1
    );
    let (status, headers, closed) = exchange(&app, declared.as_bytes()).await;
    assert_eq!(status, 413);
    assert!(says_close(&headers) && closed, "{headers:?} closed={closed}");
    // A chunked body is refused once it passes the limit.
    let mut chunked =
        b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    chunked.extend_from_slice(format!("{:x}\r\n", limit + 1).as_bytes());
    chunked.extend(std::iter::repeat_n(b' ', limit + 1));
    chunked.extend_from_slice(b"\r\n");
    let (status, headers, closed) = exchange(&app, &chunked).await;
    assert_eq!(status, 413);
    assert!(says_close(&headers) && closed, "{headers:?} closed={closed}");
    // Refusals that leave a body unread, and the connection closes after them.
    for (what, head) in [
        ("wrong media type", "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain"),
        ("no such route", "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"),
        ("no such method", "PUT /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"),
    ] {
        // The body is announced, and not sent: the server cannot read past it.
        let request = format!("{head}\r\nContent-Length: 100\r\n\r\n");
        let (status, headers, closed) = exchange(&app, request.as_bytes()).await;
        assert!(status >= 400 && says_close(&headers) && closed, "{what}: {status} {headers:?} closed={closed}");
    }
    // An answer after a body read to its end keeps the connection.
    let body = r#"{"query":"{doctors(first:1){edges{cursor}}}"}"#;
    let ok = format!(
        "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (status, headers, closed) = exchange(&app, ok.as_bytes()).await;
    assert!(status == 200 && !says_close(&headers) && !closed, "{status} {headers:?} closed={closed}");

    // What that means to a keep-alive client: its next request succeeds.
    let big = "x".repeat(limit + 1);
    for _ in 0..3 {
        let resp = app
            .client
            .post(format!("{}/graphql", app.address))
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 413);
        let (status, _) = app.post(None, "{doctors(first:1){edges{cursor}}}", json!({})).await;
        assert_eq!(status, 200);
    }
}

/// Writes all of `request` on a new connection before reading anything, then reads until the
/// server closes: the answer, or the error the client saw (a reset, when the server closed with
/// the body unread). The client's send buffer is kept small, as over a real network: loopback
/// would otherwise take megabytes into its buffers, and the client be done writing before the
/// server closed.
async fn write_all_then_read(app: &TestApp, request: &[u8]) -> Result<String, std::io::Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let patience = std::time::Duration::from_secs(30);
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_send_buffer_size(64 * 1024)?;
    let mut stream = socket.connect(([127, 0, 0, 1], app.port).into()).await?;
    tokio::time::timeout(patience, stream.write_all(request)).await.expect("the server takes the body")?;
    let mut answer = Vec::new();
    tokio::time::timeout(patience, stream.read_to_end(&mut answer)).await.expect("the server closes")?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test]
async fn a_body_far_over_the_limit_gets_its_413_read_not_a_reset() {
    let (app, _db) = TestApp::spawn().await;
    let body = vec![b' '; 1_500_000];
    // The whole length declared: refused before any of it is read, and read after the answer.
    let mut declared = format!(
        "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    declared.extend_from_slice(&body);
    // In chunks: refused once past the limit, the rest read after the answer.
    let mut chunked =
        b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for chunk in body.chunks(64 * 1024) {
        chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        chunked.extend_from_slice(chunk);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    for (what, request) in [("declared", declared), ("chunked", chunked)] {
        let answer = write_all_then_read(&app, &request).await;
        let answer = answer.unwrap_or_else(|e| panic!("{what}: the client saw {e} instead of the answer"));
        assert!(answer.starts_with("HTTP/1.1 413 "), "{what}: {answer}");
        assert!(answer.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{what}: {answer}");
        assert!(answer.contains("BAD_REQUEST"), "{what}: {answer}");
    }
    // The server still answers as before, on a kept connection.
    for _ in 0..2 {
        let (status, _) = app.post(None, "{doctors(first:1){edges{cursor}}}", json!({})).await;
        assert_eq!(status, 200);
    }
}

#[tokio::test]
async fn a_malformed_date_refuses_the_whole_request_before_anything_runs() {
    let (app, _db) = TestApp::spawn().await;
    let query = "mutation($d: Date!) { createDoctor(input: {name: \"Dr Side\"}) { id } \
                 publishSchedule(input: {doctorId: \"1\", date: $d, startTime: \"09:00\", endTime: \"10:00\"}) { created } }";
    for bad in ["2030/01/01", "2030-1-01", "2030-02-30", "tomorrow"] {
        let (status, body) = app.post(Some(&admin()), query, json!({ "d": bad })).await;
        assert_eq!((status, code(&body)), (400, "BAD_REQUEST"), "{bad}: {body}");
        assert!(body.get("data").is_none(), "{bad}: {body}");
    }
    let data = app.gql(None, "{ doctors(first: 10) { nodes { id } } }", json!({})).await;
    assert_eq!(data["doctors"]["nodes"], json!([]), "no doctor was created");
}

#[tokio::test]
async fn a_failed_field_is_null_and_fields_come_in_the_order_asked() {
    let (app, _db) = TestApp::spawn().await;
    let (doctor, slot) = app.doctor_with_slot(1).await;
    let text = |query: String| {
        let req = app.client.post(format!("{}/graphql", app.address)).json(&json!({ "query": query }));
        async move { req.send().await.unwrap().text().await.unwrap() }
    };
    // Nullable fields that fail are null, beside the others, in the order of the document.
    let query = format!(
        "{{ c: slot(id: \"{slot}\") {{ id }} b: doctor(id: \"abc\") {{ id }} a: doctor(id: \"{doctor}\") {{ id }} }}"
    );
    for _ in 0..5 {
        let body = text(query.clone()).await;
        let data = body.split("\"data\":").nth(1).unwrap_or_default();
        let want = format!("{{\"c\":{{\"id\":\"{slot}\"}},\"b\":null,\"a\":{{\"id\":\"{doctor}\"}}}}");
        assert!(data.starts_with(&want), "{body}");
        assert!(body.contains("INVALID_INPUT"), "{body}");
    }
    // A non-null field that fails nulls its parent: here `data` itself.
    let (status, body) =
        app.post(None, "{ doctors(first: 1) { nodes { id } } myAppointments { id } }", json!({})).await;
    assert_eq!((status, code(&body), &body["data"]), (200, "UNAUTHENTICATED", &Value::Null), "{body}");
    let (_, body) = app.post(None, "{ appointment(id: \"1\") { id } }", json!({})).await;
    assert_eq!(body["data"], json!({ "appointment": null }), "{body}");
}
