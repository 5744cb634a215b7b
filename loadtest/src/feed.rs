//! `--poll-feed SECS`: one SMART Scheduling Links aggregator beside the load, polling the full
//! feed as a careful one does: the manifest with `If-None-Match`, then, when it changed, every
//! file with its own `If-None-Match` and `Accept-Encoding: gzip`, so only changed files travel.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use serde_json::Value;

/// What the aggregator saw.
#[derive(Debug, Default)]
pub(crate) struct FeedStats {
    polls: u64,
    manifest_304: u64,
    files_200: u64,
    files_304: u64,
    bytes: u64,
    errors: u64,
    poll_ms: Vec<u64>,
}

impl FeedStats {
    /// One line for the report.
    pub(crate) fn line(&mut self) -> String {
        self.poll_ms.sort_unstable();
        let at = |q: f64| self.poll_ms.get(((self.poll_ms.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0);
        format!(
            "feed poller: {} polls (manifest 304: {}), files 200: {}, files 304: {}, {:.1} MB received, errors: {}, \
             poll p50 {} ms, p99 {} ms, max {} ms",
            self.polls,
            self.manifest_304,
            self.files_200,
            self.files_304,
            self.bytes as f64 / 1e6,
            self.errors,
            at(0.5),
            at(0.99),
            self.poll_ms.last().copied().unwrap_or(0)
        )
    }
}

async fn fetch(
    client: &reqwest::Client,
    url: &str,
    etag: Option<&String>,
    gzip: bool,
) -> anyhow::Result<(u16, Option<String>, Vec<u8>)> {
    let mut req = client.get(url);
    if let Some(tag) = etag {
        req = req.header("if-none-match", tag);
    }
    if gzip {
        req = req.header("accept-encoding", "gzip");
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let tag = resp.headers().get("etag").and_then(|v| v.to_str().ok()).map(str::to_owned);
    Ok((status, tag, resp.bytes().await?.to_vec()))
}

/// Polls `{base}/fhir/$bulk-publish` every `every` until `until`.
pub(crate) async fn poll(client: reqwest::Client, base: String, every: Duration, until: Instant) -> FeedStats {
    let manifest_url = format!("{}/fhir/$bulk-publish", base.trim_end_matches('/'));
    let mut stats = FeedStats::default();
    let mut manifest_tag: Option<String> = None;
    let mut tags: HashMap<String, String> = HashMap::new();
    let mut next = Instant::now();
    while next < until {
        tokio::time::sleep_until(next.into()).await;
        next += every;
        let started = Instant::now();
        stats.polls += 1;
        let manifest = match fetch(&client, &manifest_url, manifest_tag.as_ref(), false).await {
            Ok((304, _, _)) => {
                stats.manifest_304 += 1;
                stats.poll_ms.push(started.elapsed().as_millis() as u64);
                continue;
            }
            Ok((200, tag, body)) => {
                stats.bytes += body.len() as u64;
                manifest_tag = tag;
                serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null)
            }
            _ => {
                stats.errors += 1;
                continue;
            }
        };
        let urls: Vec<String> = manifest["output"]
            .as_array()
            .map(|o| o.iter().filter_map(|f| f["url"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        for url in urls {
            match fetch(&client, &url, tags.get(&url), true).await {
                Ok((304, _, _)) => stats.files_304 += 1,
                Ok((200, tag, body)) => {
                    stats.files_200 += 1;
                    stats.bytes += body.len() as u64;
                    if let Some(tag) = tag {
                        tags.insert(url, tag);
                    }
                }
                _ => stats.errors += 1,
            }
        }
        stats.poll_ms.push(started.elapsed().as_millis() as u64);
    }
    stats
}
