//! Signing in with the clinic's identity provider (contract part four): a real OpenID Connect
//! provider (npm's `oidc-provider`, `tests/idp/server.mjs`) on 127.0.0.1, tokens got the way
//! clients get them (code + PKCE as a named account, client credentials with a secret and with
//! `private_key_jwt`), verified by the service against the provider's published keys.

use std::{
    collections::HashMap,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

use crate::helpers::{admin, skip_without, user_error, TestApp, TestDatabase, BOOK, SECRET};

/// The partner's private key of `private_key_jwt` (P-256, PKCS#8 DER), made for these tests.
const PARTNER_KEY: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg+G1feurr10Df48FXgpGuj4mgFW09b1/PK9mAPEgePT+hRANCAASxSXedGlwbmW7sVS6KSPnCH2SSiIrdB1jucglZtmBI20g0E6XMyVksyFCJlSxawqjpRghPCTo+9ngxcCQuomAT";
/// Its public half, registered with the provider.
const PARTNER_JWK: &str = r#"{"kty":"EC","x":"sUl3nRpcG5lu7FUuikj5wh9kkoiK3QdY7nIJWbZgSNs","y":"SDQTpczJWSzIUImVLFrCqOlGCE8JOj72eDFwJC6iYBM","crv":"P-256"}"#;
const REDIRECT: &str = "http://127.0.0.1/callback";
const ME: &str = "{me{role patientId doctorId partnerId issuer subject noShowCount}}";
const LINK: &str =
    "mutation($i:String!,$s:String!,$p:ID!){linkPatientIdentity(input:{issuer:$i,subject:$s,patientId:$p})\
    {linked userErrors{code field}}}";
const UNLINK: &str =
    "mutation($i:String!,$s:String!){unlinkPatientIdentity(input:{issuer:$i,subject:$s}){linked userErrors{code}}}";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether node and the provider's package are here (else the test skips, or fails in CI).
fn idp_missing() -> bool {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let present = root.join("tests/idp/node_modules/oidc-provider").exists()
        && Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    skip_without("an OpenID Connect provider (node, and `npm ci --prefix tests/idp`)", present)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A provider process.
struct Idp {
    port: u16,
    issuer: String,
    alg: &'static str,
    ttl: u64,
    accounts: Value,
    audience: &'static str,
    child: Option<Child>,
    http: reqwest::Client,
}

impl Idp {
    async fn start(alg: &'static str, ttl: u64, accounts: Value) -> Self {
        Self::start_on(free_port(), alg, ttl, accounts, "clinic-booking").await
    }

    async fn start_on(port: u16, alg: &'static str, ttl: u64, accounts: Value, audience: &'static str) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        let mut idp =
            Self { port, issuer: format!("http://127.0.0.1:{port}"), alg, ttl, accounts, audience, child: None, http };
        idp.up().await;
        idp
    }

    /// Starts the process (a new signing key) and waits until it answers.
    async fn up(&mut self) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/idp");
        let child = Command::new("node")
            .current_dir(&root)
            .arg("server.mjs")
            .args(["--port", &self.port.to_string(), "--alg", self.alg, "--ttl", &self.ttl.to_string()])
            .env("IDP_ACCOUNTS", self.accounts.to_string())
            .env("IDP_PARTNER_JWK", PARTNER_JWK)
            .env("IDP_AUDIENCE", self.audience)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node starts");
        self.child = Some(child);
        for _ in 0..200 {
            if self.stats().await.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the provider did not start on port {}", self.port);
    }

    fn down(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// How many times it served its key set; `None` while it does not answer.
    async fn stats(&self) -> Option<u64> {
        let resp = self.http.get(format!("{}/test/stats", self.issuer)).send().await.ok()?;
        resp.json::<Value>().await.ok()?["jwks"].as_u64()
    }

    async fn token(&self, form: &[(&str, &str)], basic: Option<(&str, &str)>) -> String {
        let mut req = self.http.post(format!("{}/token", self.issuer)).form(form);
        if let Some((id, secret)) = basic {
            req = req.basic_auth(id, Some(secret));
        }
        let body: Value = req.send().await.unwrap().json().await.unwrap();
        body["access_token"].as_str().unwrap_or_else(|| panic!("no access token: {body}")).to_owned()
    }

    /// A machine client's token (client credentials, `client_secret_basic`).
    async fn client_token(&self, client: &str) -> String {
        let secret = format!("secret-{}", client.trim_start_matches("partner-"));
        self.token(&[("grant_type", "client_credentials"), ("scope", "api")], Some((client, &secret))).await
    }

    /// `partner-jwt`'s token: client credentials authenticated by a signed assertion.
    async fn private_key_jwt_token(&self) -> String {
        let now = chrono::Utc::now().timestamp();
        let claims = json!({
            "iss": "partner-jwt", "sub": "partner-jwt", "aud": format!("{}/token", self.issuer),
            "jti": uuid::Uuid::new_v4().to_string(), "iat": now, "exp": now + 60,
        });
        let der = base64::engine::general_purpose::STANDARD.decode(PARTNER_KEY).unwrap();
        let assertion =
            jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &EncodingKey::from_ec_der(&der)).unwrap();
        let form = [
            ("grant_type", "client_credentials"),
            ("scope", "api"),
            ("client_id", "partner-jwt"),
            ("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
            ("client_assertion", &assertion),
        ];
        self.token(&form, None).await
    }

    /// Signs `account` in to the public SPA client: authorization code + PKCE through the
    /// provider's login page, cookies kept by hand, then the code exchanged for the tokens.
    async fn sign_in(&self, account: &str) -> String {
        let verifier = b64(uuid::Uuid::new_v4().as_bytes()) + &b64(uuid::Uuid::new_v4().as_bytes());
        let challenge = b64(&Sha256::digest(verifier.as_bytes()));
        let mut url = format!(
            "{}/auth?client_id=spa&response_type=code&scope=openid%20api&redirect_uri={}&code_challenge={challenge}\
             &code_challenge_method=S256&state=s1",
            self.issuer,
            percent_encode(REDIRECT)
        );
        let mut cookies: HashMap<String, String> = HashMap::new();
        let mut form: Option<Vec<(&str, String)>> = None;
        for _ in 0..10 {
            let cookie = cookies.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
            let req = match form.take() {
                Some(f) => self.http.post(&url).form(&f),
                None => self.http.get(&url),
            };
            let resp = req.header("cookie", cookie).send().await.unwrap();
            for c in resp.headers().get_all("set-cookie") {
                let pair = c.to_str().unwrap().split(';').next().unwrap_or_default();
                if let Some((k, v)) = pair.split_once('=') {
                    cookies.insert(k.trim().to_owned(), v.to_owned());
                }
            }
            let location = resp.headers().get("location").map(|l| l.to_str().unwrap().to_owned());
            match location {
                Some(to) if to.starts_with(REDIRECT) => {
                    let code = url::Url::parse(&to)
                        .unwrap()
                        .query_pairs()
                        .find(|(k, _)| k == "code")
                        .map(|(_, v)| v.into_owned())
                        .expect("a code");
                    let form = [
                        ("grant_type", "authorization_code"),
                        ("code", code.as_str()),
                        ("redirect_uri", REDIRECT),
                        ("code_verifier", verifier.as_str()),
                        ("client_id", "spa"),
                    ];
                    return self.token(&form, None).await;
                }
                Some(to) => url = if to.starts_with('/') { format!("{}{to}", self.issuer) } else { to },
                None => {
                    // The provider's login page: sign in as `account`.
                    let page = resp.text().await.unwrap();
                    assert!(page.contains(r#"value="login""#), "expected the login page: {page}");
                    form = Some(vec![("prompt", "login".into()), ("login", account.into()), ("password", "x".into())]);
                }
            }
        }
        panic!("the sign-in did not end at the redirect URI");
    }
}

impl Drop for Idp {
    fn drop(&mut self) {
        self.down();
    }
}

fn percent_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// `AUTH_ISSUERS` for these providers, each with `extra` keys (a JSON object's inside).
fn issuers(idps: &[&Idp], extra: &str) -> String {
    let list: Vec<String> =
        idps.iter().map(|i| format!(r#"{{"issuer":"{}","audience":"clinic-booking"{extra}}}"#, i.issuer)).collect();
    format!("[{}]", list.join(","))
}

async fn spawn_with(config: &str) -> (TestApp, TestDatabase) {
    let database = TestDatabase::new().await;
    let app = TestApp::spawn_on(&database, &[("AUTH_ISSUERS", config)]).await;
    (app, database)
}

/// The service has the provider's keys (fetched in the background at start).
async fn wait_ready(app: &TestApp) -> Value {
    let mut last = Value::Null;
    for _ in 0..600 {
        last = app.client.get(format!("{}/readyz", app.address)).send().await.unwrap().json().await.unwrap();
        if last["status"] == "ok" {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the service never had every provider's keys: {last}");
}

async fn me(app: &TestApp, token: &str) -> Value {
    app.gql(Some(token), ME, json!({})).await["me"].clone()
}

async fn refused(app: &TestApp, token: &str) -> bool {
    let (status, body) = app.post(Some(token), ME, json!({})).await;
    status == 401 && body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
}

#[tokio::test]
async fn an_spa_patient_signs_in_and_is_linked_on_first_use() {
    if idp_missing() {
        return;
    }
    let idp = Idp::start("ES256", 600, json!({"alice": {"role": "patient"}, "bob": {"role": "patient"}})).await;
    let (app, _db) = spawn_with(&issuers(&[&idp], "")).await;
    wait_ready(&app).await;

    let first = idp.sign_in("alice").await;
    let who = me(&app, &first).await;
    assert_eq!((who["role"].as_str(), who["subject"].as_str()), (Some("PATIENT"), Some("alice")), "{who}");
    assert_eq!(who["issuer"], idp.issuer.as_str());
    let patient: i64 = who["patientId"].as_str().unwrap().parse().unwrap();
    assert!(patient > 999_999_999_999, "made patients live above the clinic's ids: {patient}");
    assert_eq!(who["noShowCount"], 0, "a new patient has missed nothing: {who}");
    let again = idp.sign_in("alice").await;
    assert_ne!(first, again);
    assert_eq!(me(&app, &again).await["patientId"], who["patientId"], "the same (iss, sub) is the same patient");

    // Its bookings are its own.
    let (_doctor, slot) = app.doctor_with_slot(1).await;
    let booked = app.gql(Some(&again), BOOK, json!({ "s": slot, "k": "k1" })).await;
    assert_eq!(booked["bookAppointment"]["appointment"]["patientId"], who["patientId"]);
    let mine = app.gql(Some(&first), "{myAppointments{id}}", json!({})).await;
    assert_eq!(mine["myAppointments"].as_array().map(Vec::len), Some(1));

    // An admin links an identity to a patient the clinic knows, before its first sign-in.
    let link = json!({ "i": idp.issuer, "s": "bob", "p": "77" });
    let linked = app.gql(Some(&admin()), LINK, link.clone()).await;
    assert_eq!(linked["linkPatientIdentity"]["linked"], true);
    let again = app.gql(Some(&admin()), LINK, link).await;
    assert_eq!(user_error(&again["linkPatientIdentity"]), Some("IDENTITY_ALREADY_LINKED"));
    assert_eq!(me(&app, &idp.sign_in("bob").await).await["patientId"], "77");
    let taken = json!({ "i": idp.issuer, "s": "alice", "p": "78" });
    let taken = app.gql(Some(&admin()), LINK, taken).await;
    assert_eq!(user_error(&taken["linkPatientIdentity"]), Some("IDENTITY_ALREADY_LINKED"), "linked on first use");
    let patient_token = crate::helpers::patient(5);
    let code = app.error_code(Some(&patient_token), UNLINK, json!({ "i": idp.issuer, "s": "bob" })).await;
    assert_eq!(code, "FORBIDDEN");
    let unlinked = app.gql(Some(&admin()), UNLINK, json!({ "i": idp.issuer, "s": "bob" })).await;
    assert_eq!(unlinked["unlinkPatientIdentity"]["linked"], false);
    let relinked = app.gql(Some(&admin()), LINK, json!({ "i": idp.issuer, "s": "bob", "p": "79" })).await;
    assert_eq!(relinked["linkPatientIdentity"]["linked"], true);
}

#[tokio::test]
async fn machine_clients_are_partners_named_by_client_id() {
    if idp_missing() {
        return;
    }
    let idp = Idp::start("RS256", 600, json!({})).await;
    let (app, _db) = spawn_with(&issuers(&[&idp], "")).await;
    wait_ready(&app).await;
    let a = idp.client_token("partner-a").await;
    let b = idp.client_token("partner-b").await;
    let signed = idp.private_key_jwt_token().await;
    for (token, id) in [(&a, "partner-a"), (&b, "partner-b"), (&signed, "partner-jwt")] {
        let who = me(&app, token).await;
        assert_eq!((who["role"].as_str(), who["partnerId"].as_str()), (Some("PARTNER"), Some(id)), "{who}");
    }
    // Two client ids are two partners: each sees only what it created.
    let (_doctor, slot) = app.doctor_with_slot(2).await;
    let booked = app.gql(Some(&a), BOOK, json!({ "s": slot, "k": "same", "p": "5" })).await;
    let id = booked["bookAppointment"]["appointment"]["id"].as_str().unwrap().to_owned();
    let read = "query($id:ID!){appointment(id:$id){id}}";
    assert_eq!(app.gql(Some(&a), read, json!({ "id": id })).await["appointment"]["id"], id.as_str());
    assert!(app.gql(Some(&b), read, json!({ "id": id })).await["appointment"].is_null());
    // A JWT_SECRET partner named like the client is another partner too.
    let local = crate::helpers::partner("partner-a");
    assert!(app.gql(Some(&local), read, json!({ "id": id })).await["appointment"].is_null());
}

#[tokio::test]
async fn doctors_admins_and_claimed_patients_follow_the_claim_map() {
    if idp_missing() {
        return;
    }
    let accounts = json!({
        "dr": {"groups": {"clinic": ["staff"]}, "fhirUser": "Practitioner/41"},
        "dr2": {"groups": {"clinic": "staff"}, "doctor_id": "42"},
        "boss": {"groups": {"clinic": ["x", "clinic-admin"]}},
        "pat": {"groups": {"clinic": ["person"]}, "fhirUser": "Patient/12"},
        "nobody": {"groups": {"clinic": ["unknown"]}},
    });
    let idp = Idp::start("ES256", 600, accounts).await;
    let map = r#","role_claim":"groups.clinic","roles":{"staff":"doctor","clinic-admin":"admin","person":"patient"},"patients":"claim""#;
    let (app, _db) = spawn_with(&issuers(&[&idp], map)).await;
    wait_ready(&app).await;
    assert_eq!(me(&app, &idp.sign_in("dr").await).await["doctorId"], "41");
    assert_eq!(me(&app, &idp.sign_in("dr2").await).await["doctorId"], "42");
    assert_eq!(me(&app, &idp.sign_in("boss").await).await["role"], "ADMIN");
    assert_eq!(me(&app, &idp.sign_in("pat").await).await["patientId"], "12");
    assert!(refused(&app, &idp.sign_in("nobody").await).await, "no mapped role");
    // The service's own tokens keep working beside the provider, with no issuer.
    assert!(me(&app, &admin()).await["issuer"].is_null());
}

/// A token with its header or payload replaced (the signature kept).
fn reshape(token: &str, header: Option<Value>, payload: impl FnOnce(&mut Value)) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    let decode = |s: &str| -> Value {
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).unwrap()).unwrap()
    };
    let mut body = decode(parts[1]);
    payload(&mut body);
    let head = header.map_or(parts[0].to_owned(), |h| b64(h.to_string().as_bytes()));
    format!("{head}.{}.{}", b64(body.to_string().as_bytes()), parts[2])
}

#[tokio::test]
async fn every_bad_token_is_refused_unauthenticated() {
    if idp_missing() {
        return;
    }
    let idp = Idp::start("ES256", 600, json!({"alice": {"role": "patient", "patient": "3"}})).await;
    let elsewhere = Idp::start_on(free_port(), "ES256", 600, json!({}), "another-api").await;
    let short = Idp::start("ES256", 2, json!({})).await;
    let config = format!(
        "[{},{},{}]",
        issuers(&[&idp], "").trim_matches(['[', ']']),
        issuers(&[&elsewhere], "").trim_matches(['[', ']']),
        issuers(&[&short], r#","leeway_seconds":0"#).trim_matches(['[', ']'])
    );
    let (app, _db) = spawn_with(&config).await;
    wait_ready(&app).await;
    let good = idp.sign_in("alice").await;
    assert_eq!(me(&app, &good).await["patientId"], "3", "the patient claim");
    let now = chrono::Utc::now().timestamp();
    let kid = jsonwebtoken::decode_header(&good).unwrap().kid.unwrap();
    let hs = |claims: Value| {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let bad = [
        ("malformed", "not-a-jwt".to_owned()),
        ("wrong audience", elsewhere.client_token("partner-a").await),
        ("unknown issuer", hs(json!({"iss": "https://unknown.example", "sub": "1", "role": "admin", "exp": now + 60}))),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(br#"{"alg":"none","typ":"JWT"}"#),
                b64(json!({"iss": idp.issuer, "sub": "x", "role": "admin", "aud": "clinic-booking", "exp": now + 60})
                    .to_string()
                    .as_bytes())
            ),
        ),
        (
            "HS256 under a provider's iss (signed with JWT_SECRET)",
            hs(json!({"iss": idp.issuer, "sub": "1", "role": "admin", "aud": "clinic-booking", "exp": now + 60})),
        ),
        ("tampered payload", reshape(&good, None, |c| c["role"] = json!("admin"))),
        ("unknown kid", reshape(&good, Some(json!({"alg": "ES256", "kid": format!("{kid}-other")})), |_| {})),
        ("HS256 header on a provider's token", reshape(&good, Some(json!({"alg": "HS256", "kid": kid})), |_| {})),
    ];
    for (why, token) in &bad {
        assert!(refused(&app, token).await, "{why} must be refused");
    }
    // An expired token (2 s, leeway 0), on every operation, public ones included.
    let expiring = short.client_token("partner-a").await;
    assert_eq!(me(&app, &expiring).await["role"], "PARTNER");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(refused(&app, &expiring).await, "expired (also when remembered)");
    let (status, _) = app.post(Some(&expiring), "{doctors(first:1){edges{node{id}}}}", json!({})).await;
    assert_eq!(status, 401);
    let metrics = app.client.get(format!("{}/metrics", app.address)).send().await.unwrap().text().await.unwrap();
    for reason in ["malformed", "audience", "unknown_issuer", "algorithm", "signature", "unknown_key", "expired"] {
        assert!(metrics.contains(&format!("auth_tokens_refused_total{{reason=\"{reason}\"}}")), "{reason} counted");
    }
}

#[tokio::test]
async fn unknown_keys_cost_at_most_one_fetch_per_30_seconds_and_a_rotation_is_picked_up() {
    if idp_missing() {
        return;
    }
    let port = free_port();
    let mut idp = Idp::start_on(port, "ES256", 600, json!({}), "clinic-booking").await;
    let (app, _db) = spawn_with(&issuers(&[&idp], "")).await;
    wait_ready(&app).await;
    let token = idp.client_token("partner-a").await;
    assert_eq!(me(&app, &token).await["role"], "PARTNER");

    // 50 tokens naming random unknown keys, at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let forged = reshape(&token, Some(json!({"alg": "ES256", "kid": uuid::Uuid::new_v4().to_string()})), |_| {});
        let (client, address, barrier) = (app.client.clone(), app.address.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let resp = client
                .post(format!("{address}/graphql"))
                .bearer_auth(forged)
                .json(&json!({ "query": ME }))
                .send()
                .await
                .unwrap();
            resp.status().as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 401);
    }
    let served = idp.stats().await.unwrap();
    assert!(served <= 2, "the key set was fetched {served} times within 30 s (start-up included)");

    // The provider restarts with a new key: its new tokens are accepted once the set is
    // fetched again, which a token naming the new key asks for after 30 s.
    idp.down();
    idp.up().await;
    let rotated = idp.client_token("partner-b").await;
    assert_ne!(jsonwebtoken::decode_header(&rotated).unwrap().kid, jsonwebtoken::decode_header(&token).unwrap().kid);
    tokio::time::sleep(keys_refetch_wait()).await;
    assert_eq!(me(&app, &rotated).await["partnerId"], "partner-b", "the rotated key is fetched");
    assert_eq!(idp.stats().await, Some(1), "one fetch for the new key");
}

/// Past the 30 s between two fetches asked for by tokens.
fn keys_refetch_wait() -> Duration {
    clinic_booking::auth::keys::REFETCH_EVERY + Duration::from_secs(1)
}

#[tokio::test]
async fn a_provider_down_at_start_is_named_by_readyz_until_it_is_up() {
    if idp_missing() {
        return;
    }
    let port = free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let config = format!(r#"[{{"issuer":"{issuer}","audience":"clinic-booking"}}]"#);
    let (app, _db) = spawn_with(&config).await;
    let ready: Value = app.client.get(format!("{}/readyz", app.address)).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["issuers"][&issuer], "unreachable");
    assert_eq!(me(&app, &admin()).await["role"], "ADMIN", "the service serves meanwhile");
    let smart = app.client.get(format!("{}/fhir/.well-known/smart-configuration", app.address)).send().await.unwrap();
    assert_eq!(smart.status().as_u16(), 503);

    let idp = Idp::start_on(port, "ES256", 600, json!({}), "clinic-booking").await;
    let ready = wait_ready(&app).await;
    assert_eq!(ready["issuers"][&issuer], "ok");
    assert_eq!(me(&app, &idp.client_token("partner-a").await).await["role"], "PARTNER");

    // Apps discover where to sign in.
    let smart: Value = app
        .client
        .get(format!("{}/fhir/.well-known/smart-configuration", app.address))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(smart["issuer"], issuer.as_str());
    assert_eq!(smart["authorization_endpoint"], format!("{issuer}/auth"));
    assert_eq!(smart["token_endpoint"], format!("{issuer}/token"));
    assert_eq!(smart["code_challenge_methods_supported"], json!(["S256"]));
    for capability in [
        "launch-standalone",
        "client-public",
        "client-confidential-asymmetric",
        "context-standalone-patient",
        "permission-v2",
    ] {
        assert!(smart["capabilities"].as_array().unwrap().contains(&json!(capability)), "{capability}");
    }
    let metadata: Value =
        app.client.get(format!("{}/fhir/metadata", app.address)).send().await.unwrap().json().await.unwrap();
    let security = &metadata["rest"][0]["security"];
    assert_eq!(security["service"][0]["coding"][0]["code"], "SMART-on-FHIR", "{security}");
    assert_eq!(security["extension"][0]["extension"][0]["valueUri"], format!("{issuer}/auth"));
}

#[tokio::test]
async fn smart_configuration_is_404_without_providers() {
    let (app, _db) = TestApp::spawn().await;
    let resp = app.client.get(format!("{}/fhir/.well-known/smart-configuration", app.address)).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let ready: Value = app.client.get(format!("{}/readyz", app.address)).send().await.unwrap().json().await.unwrap();
    assert!(ready.get("issuers").is_none(), "{ready}");
}

#[tokio::test]
async fn a_websocket_closes_with_4401_when_its_token_expires() {
    if idp_missing() {
        return;
    }
    let idp = Idp::start("ES256", 3, json!({})).await;
    let (app, _db) = spawn_with(&issuers(&[&idp], r#","leeway_seconds":1"#)).await;
    wait_ready(&app).await;
    let token = idp.client_token("partner-a").await;
    let mut req = format!("ws://127.0.0.1:{}/graphql/ws", app.port).into_client_request().unwrap();
    req.headers_mut().insert("Sec-WebSocket-Protocol", "graphql-transport-ws".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let init = json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } });
    ws.send(Message::text(init.to_string())).await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    })
    .await
    .expect("closed once the token expired");
    assert_eq!(closed, Some(4401));
}

#[tokio::test]
async fn two_providers_with_equal_subjects_are_different_people() {
    if idp_missing() {
        return;
    }
    let one = Idp::start("ES256", 600, json!({})).await;
    let two = Idp::start("RS256", 600, json!({})).await;
    let (app, _db) = spawn_with(&issuers(&[&one, &two], "")).await;
    wait_ready(&app).await;
    let (a, b) = (me(&app, &one.sign_in("alice").await).await, me(&app, &two.sign_in("alice").await).await);
    assert_eq!((a["subject"].as_str(), b["subject"].as_str()), (Some("alice"), Some("alice")));
    assert_ne!(a["patientId"], b["patientId"], "{a} {b}");

    let (first, second) = (one.client_token("partner-a").await, two.client_token("partner-a").await);
    let (_doctor, slot) = app.doctor_with_slot(1).await;
    let booked = app.gql(Some(&first), BOOK, json!({ "s": slot, "k": "k", "p": "9" })).await;
    let id = booked["bookAppointment"]["appointment"]["id"].as_str().unwrap().to_owned();
    let read = "query($id:ID!){appointment(id:$id){id}}";
    assert!(app.gql(Some(&second), read, json!({ "id": id })).await["appointment"].is_null());
    // The same idempotency key of the other provider's partner is another key.
    let (_d, other_slot) = app.doctor_with_slot(1).await;
    let again = app.gql(Some(&second), BOOK, json!({ "s": other_slot, "k": "k", "p": "10" })).await;
    assert_eq!(again["bookAppointment"]["replayed"], false, "{again}");
    assert!(again["bookAppointment"]["userErrors"].as_array().is_some_and(Vec::is_empty), "{again}");
}
