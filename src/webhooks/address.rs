//! The SSRF rule of webhook URLs: which addresses an endpoint may reach.
//!
//! An endpoint is a URL a partner chose, fetched from inside the clinic's network, so it must
//! not be a way into that network. Only public unicast addresses are reachable; every
//! loopback, private, link-local, unique-local, multicast, unspecified, shared (CGNAT),
//! documentation, benchmarking or otherwise reserved address is refused, in IPv4 and IPv6
//! (IPv4-mapped, NAT64 and 6to4 addresses by the IPv4 address they carry), unless it lies in
//! `WEBHOOK_ALLOW_CIDRS`. Plain `http://` is only for addresses in that list.
//!
//! The rule is applied twice: to the URL when the endpoint is created ([`UrlPolicy::check`],
//! which also resolves a name once), and to every address actually connected to (the
//! resolver of [`super::sender`], and [`UrlPolicy::literal`] for URLs naming an address,
//! which never reach a resolver). A name whose addresses change between the two is caught by
//! the second.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Duration,
};

use ipnet::IpNet;
use reqwest::Url;

/// Longest accepted URL.
pub const MAX_URL_LEN: usize = 2048;
/// Longest wait for resolving a name when an endpoint is created.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why an address is not public.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonPublic {
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `100.64.0.0/10`, carrier-grade NAT.
    SharedAddressSpace,
    /// `169.254/16`, `fe80::/10` (cloud metadata services live here).
    LinkLocal,
    /// `fc00::/7`.
    UniqueLocal,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18.0.0/15`.
    Benchmarking,
    /// Anything else set aside: `0/8`, `192.0.0/24`, `192.88.99/24`, `240/4`, IPv4-compatible
    /// IPv6, `64:ff9b:1::/48`, `100::/64`, `2001::/23` (Teredo included), `fec0::/10`, and
    /// every IPv6 address outside `2000::/3`.
    Reserved,
}

impl fmt::Display for NonPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unspecified => "an unspecified address",
            Self::Loopback => "a loopback address",
            Self::Private => "a private address",
            Self::SharedAddressSpace => "a shared (carrier-grade NAT) address",
            Self::LinkLocal => "a link-local address",
            Self::UniqueLocal => "a unique-local address",
            Self::Multicast => "a multicast address",
            Self::Broadcast => "the broadcast address",
            Self::Documentation => "a documentation address",
            Self::Benchmarking => "a benchmarking address",
            Self::Reserved => "a reserved address",
        })
    }
}

/// Why an address is not public; `None` for a public unicast address.
pub fn classify(ip: IpAddr) -> Option<NonPublic> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<NonPublic> {
    use NonPublic::*;
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() => Unspecified,
        (0, _, _) => Reserved,
        (10, _, _) => Private,
        (100, 64..=127, _) => SharedAddressSpace,
        (127, _, _) => Loopback,
        (169, 254, _) => LinkLocal,
        (172, 16..=31, _) => Private,
        (192, 0, 0) | (192, 88, 99) => Reserved,
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Documentation,
        (192, 168, _) => Private,
        (198, 18..=19, _) => Benchmarking,
        (224..=239, _, _) => Multicast,
        _ if ip.is_broadcast() => Broadcast,
        (240..=255, _, _) => Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<NonPublic> {
    use NonPublic::*;
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    Some(match s {
        _ if ip.is_unspecified() => Unspecified,
        _ if ip.is_loopback() => Loopback,
        // IPv4-compatible (deprecated): never a real destination.
        [0, 0, 0, 0, 0, 0, _, _] => Reserved,
        // NAT64 (well-known prefix): a gateway forwards it to the IPv4 address inside.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => return classify_v4(embedded(hi, lo)),
        [0x64, 0xff9b, 1, ..] => Reserved,
        [0x100, 0, 0, 0, ..] => Reserved,
        [0x2001, 0xdb8, ..] => Documentation,
        [0x2001, 0..=0x1ff, ..] => Reserved,
        // 6to4: a relay forwards it to the IPv4 address inside.
        [0x2002, hi, lo, ..] => return classify_v4(embedded(hi, lo)),
        [0x3fff, 0..=0x0fff, ..] => Documentation,
        [x, ..] if x & 0xfe00 == 0xfc00 => UniqueLocal,
        [x, ..] if x & 0xffc0 == 0xfe80 => LinkLocal,
        [x, ..] if x & 0xffc0 == 0xfec0 => Reserved,
        [x, ..] if x & 0xff00 == 0xff00 => Multicast,
        // Global unicast is 2000::/3; everything else is unassigned or special.
        [x, ..] if x & 0xe000 != 0x2000 => Reserved,
        _ => return None,
    })
}

/// Whether an endpoint's URL is `https://` or plain `http://`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// `https://`: public addresses, and those of the allow-list.
    Https,
    /// `http://`: only addresses of the allow-list.
    Http,
}

/// The rule, with the allow-list of `WEBHOOK_ALLOW_CIDRS`.
#[derive(Clone, Debug, Default)]
pub struct UrlPolicy {
    allow: Vec<IpNet>,
}

/// A webhook URL that passed the rule, with how it is reached.
#[derive(Clone, Debug)]
pub struct CheckedUrl {
    /// The URL, normalised (`HTTPS://Example.com` reads `https://example.com/`).
    pub url: Url,
    /// Its scheme.
    pub scheme: Scheme,
}

impl UrlPolicy {
    /// The rule with these extra networks allowed.
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self { allow }
    }

    /// Whether `ip` is in the allow-list (an IPv4-mapped IPv6 address also as its IPv4 form).
    pub fn allowed(&self, ip: IpAddr) -> bool {
        let canonical = ip.to_canonical();
        self.allow.iter().any(|net| net.contains(&ip) || net.contains(&canonical))
    }

    /// Whether a connection to `ip` for a URL of `scheme` is allowed; `Err` says why not.
    pub fn permits(&self, ip: IpAddr, scheme: Scheme) -> Result<(), String> {
        if self.allowed(ip) {
            return Ok(());
        }
        match (scheme, classify(ip)) {
            (Scheme::Http, _) => Err(format!("{ip} is not in WEBHOOK_ALLOW_CIDRS, which plain http:// requires")),
            (Scheme::Https, Some(why)) => Err(format!("{ip} is {why}")),
            (Scheme::Https, None) => Ok(()),
        }
    }

    /// The checks that need no resolver: the URL's form, its scheme, and its host when that is
    /// an address or a name that is always local (`localhost`).
    pub fn parse(&self, raw: &str) -> Result<CheckedUrl, String> {
        if raw.len() > MAX_URL_LEN {
            return Err(format!("url must be at most {MAX_URL_LEN} characters"));
        }
        let url = Url::parse(raw.trim()).map_err(|e| format!("url is not a valid URL ({e})"))?;
        let scheme = match url.scheme() {
            "https" => Scheme::Https,
            "http" => Scheme::Http,
            other => return Err(format!("url must be https:// (not {other}:)")),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err("url must not carry a user name or password (requests are signed instead)".into());
        }
        if scheme == Scheme::Http && self.allow.is_empty() {
            return Err("url must be https:// (plain http:// is only for hosts in WEBHOOK_ALLOW_CIDRS)".into());
        }
        match host_of(&url)? {
            Host::Ip(ip) => self.permits(ip, scheme).map_err(refused)?,
            Host::Name(name) => {
                // `localhost` is loopback without asking anyone; `.invalid` is left to `check`.
                if let Some(Ok(addrs)) = special_name(&name) {
                    check_all(self, &addrs, scheme)?;
                }
            }
        }
        Ok(CheckedUrl { url, scheme })
    }

    /// [`UrlPolicy::parse`], then the addresses a name resolves to now, all of which must be
    /// allowed. A name that does not resolve is accepted for `https://` (the connection will
    /// check again), refused for `http://` (it cannot be shown to be in the allow-list).
    pub async fn check(&self, raw: &str) -> Result<CheckedUrl, String> {
        let checked = self.parse(raw)?;
        if let Host::Name(name) = host_of(&checked.url)? {
            let resolved = match special_name(&name) {
                // Checked by `parse` already.
                Some(Ok(_)) => return Ok(checked),
                Some(Err(none)) => Err(none),
                None => tokio::time::timeout(RESOLVE_TIMEOUT, resolve(&name))
                    .await
                    .unwrap_or_else(|_| Err(format!("{name} did not resolve in time"))),
            };
            match resolved {
                Ok(addrs) => check_all(self, &addrs, checked.scheme)?,
                Err(why) if checked.scheme == Scheme::Http => {
                    return Err(format!("url: {why}, and plain http:// is only for hosts in WEBHOOK_ALLOW_CIDRS"))
                }
                // Accepted: every connection checks again, and fails while it does not resolve.
                Err(_) => {}
            }
        }
        Ok(checked)
    }

    /// The check of a URL whose host is an address, at connection time (such URLs never reach
    /// the resolver). `Ok` for a name: the resolver checks it.
    pub fn literal(&self, url: &Url, scheme: Scheme) -> Result<(), String> {
        match host_of(url)? {
            Host::Ip(ip) => self.permits(ip, scheme),
            Host::Name(_) => Ok(()),
        }
    }

    /// The addresses of `name` a connection for `scheme` may use; `Err` when there are none.
    pub async fn resolve_permitted(&self, name: &str, scheme: Scheme) -> Result<Vec<SocketAddr>, String> {
        let addrs = match special_name(name) {
            Some(special) => special?,
            None => resolve(name).await?,
        };
        let mut refusals = Vec::new();
        let permitted: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| match self.permits(a.ip(), scheme) {
                Ok(()) => true,
                Err(why) => {
                    refusals.push(why);
                    false
                }
            })
            .collect();
        if permitted.is_empty() {
            return Err(format!("{name}: no permitted address ({})", refusals.join("; ")));
        }
        Ok(permitted)
    }
}

fn refused(why: String) -> String {
    format!("url is refused: {why}")
}

fn check_all(policy: &UrlPolicy, addrs: &[SocketAddr], scheme: Scheme) -> Result<(), String> {
    addrs.iter().try_for_each(|a| policy.permits(a.ip(), scheme)).map_err(refused)
}

enum Host {
    Ip(IpAddr),
    Name(String),
}

fn host_of(url: &Url) -> Result<Host, String> {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => Ok(Host::Ip(IpAddr::V4(ip))),
        Some(url::Host::Ipv6(ip)) => Ok(Host::Ip(IpAddr::V6(ip))),
        Some(url::Host::Domain(name)) if !name.is_empty() => Ok(Host::Name(name.to_ascii_lowercase())),
        _ => Err("url must name a host".into()),
    }
}

/// Names answered without asking DNS (RFC 6761): `localhost` (and `*.localhost`) are the
/// loopback addresses whatever a resolver or `/etc/hosts` says, and `*.invalid` never exists.
fn special_name(name: &str) -> Option<Result<Vec<SocketAddr>, String>> {
    let name = name.trim_end_matches('.');
    if name == "localhost" || name.ends_with(".localhost") {
        return Some(Ok(vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 0),
        ]));
    }
    if name == "invalid" || name.ends_with(".invalid") {
        return Some(Err(format!("{name} does not resolve (.invalid never does)")));
    }
    None
}

async fn resolve(name: &str) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> =
        tokio::net::lookup_host((name, 0)).await.map_err(|e| format!("{name} does not resolve ({e})"))?.collect();
    if addrs.is_empty() {
        return Err(format!("{name} resolves to no address"));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(ip: &str) -> Option<NonPublic> {
        classify(ip.parse().unwrap())
    }

    #[test]
    fn ipv4_ranges() {
        use NonPublic::*;
        let cases = [
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Reserved)),
            ("10.0.0.1", Some(Private)),
            ("10.255.255.255", Some(Private)),
            ("100.63.255.255", None),
            ("100.64.0.0", Some(SharedAddressSpace)),
            ("100.127.255.255", Some(SharedAddressSpace)),
            ("100.128.0.0", None),
            ("126.255.255.255", None),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("169.253.255.255", None),
            ("169.254.169.254", Some(LinkLocal)),
            ("169.255.0.0", None),
            ("172.15.255.255", None),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.0", None),
            ("192.0.0.8", Some(Reserved)),
            ("192.0.1.1", None),
            ("192.0.2.1", Some(Documentation)),
            ("192.88.99.1", Some(Reserved)),
            ("192.167.255.255", None),
            ("192.168.0.1", Some(Private)),
            ("192.169.0.0", None),
            ("198.17.255.255", None),
            ("198.18.0.1", Some(Benchmarking)),
            ("198.19.255.255", Some(Benchmarking)),
            ("198.20.0.0", None),
            ("198.51.100.7", Some(Documentation)),
            ("203.0.113.9", Some(Documentation)),
            ("203.0.114.0", None),
            ("223.255.255.255", None),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("240.0.0.1", Some(Reserved)),
            ("255.255.255.254", Some(Reserved)),
            ("255.255.255.255", Some(Broadcast)),
            ("1.1.1.1", None),
            ("8.8.8.8", None),
            ("93.184.215.14", None),
        ];
        for (ip, want) in cases {
            assert_eq!(class(ip), want, "{ip}");
        }
    }

    #[test]
    fn ipv6_ranges() {
        use NonPublic::*;
        let cases = [
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("::2", Some(Reserved)),
            ("::127.0.0.1", Some(Reserved)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::7f00:1", Some(Loopback)),
            ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
            ("64:ff9b::808:808", None),
            ("64:ff9b:1::1", Some(Reserved)),
            ("100::1", Some(Reserved)),
            ("2001::1", Some(Reserved)),
            ("2001:1ff::1", Some(Reserved)),
            ("2001:200::1", None),
            ("2001:db8::1", Some(Documentation)),
            ("2002:7f00:1::1", Some(Loopback)),
            ("2002:c0a8:101::1", Some(Private)),
            ("2002:808:808::1", None),
            ("2606:4700:4700::1111", None),
            ("2a00:1450:4001::1", None),
            ("3fff::1", Some(Documentation)),
            ("3fff:fff::1", Some(Documentation)),
            ("3fff:1000::1", None),
            ("4000::1", Some(Reserved)),
            ("5f00::1", Some(Reserved)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("fec0::1", Some(Reserved)),
            ("ff02::1", Some(Multicast)),
            ("ff0e::1", Some(Multicast)),
            ("1::1", Some(Reserved)),
            ("e000::1", Some(Reserved)),
        ];
        for (ip, want) in cases {
            assert_eq!(class(ip), want, "{ip}");
        }
    }

    #[test]
    fn every_v4_block_boundary_is_classified_consistently() {
        // Walk the first and last address of every /8 … /24 block the table names: a block's
        // ends classify like its middle.
        for (net, want) in [
            ("10.0.0.0/8", NonPublic::Private),
            ("100.64.0.0/10", NonPublic::SharedAddressSpace),
            ("127.0.0.0/8", NonPublic::Loopback),
            ("169.254.0.0/16", NonPublic::LinkLocal),
            ("172.16.0.0/12", NonPublic::Private),
            ("192.168.0.0/16", NonPublic::Private),
            ("198.18.0.0/15", NonPublic::Benchmarking),
            ("224.0.0.0/4", NonPublic::Multicast),
        ] {
            let net: ipnet::Ipv4Net = net.parse().unwrap();
            for ip in [net.network(), net.broadcast()] {
                assert_eq!(classify_v4(ip), Some(want), "{ip} in {net}");
            }
            let before = Ipv4Addr::from(u32::from(net.network()) - 1);
            let after = Ipv4Addr::from(u32::from(net.broadcast()).wrapping_add(1));
            assert_ne!(classify_v4(before), Some(want), "{before} before {net}");
            assert_ne!(classify_v4(after), Some(want), "{after} after {net}");
        }
    }

    fn policy(allow: &str) -> UrlPolicy {
        UrlPolicy::new(crate::webhooks::settings::parse_cidrs(allow).unwrap())
    }

    #[test]
    fn urls_refused_without_an_allow_list() {
        let p = policy("");
        for url in [
            "https://127.0.0.1/hook",
            "https://127.1/hook",
            "https://0x7f000001/hook",
            "https://2130706433/hook",
            "https://localhost/hook",
            "https://LOCALHOST./hook",
            "https://api.localhost/hook",
            "https://10.0.0.5/hook",
            "https://192.168.1.1/hook",
            "https://172.16.0.1/hook",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/hook",
            "https://0.0.0.0/hook",
            "https://[::1]/hook",
            "https://[::]/hook",
            "https://[::ffff:127.0.0.1]/hook",
            "https://[::ffff:7f00:1]/hook",
            "https://[fd00::1]/hook",
            "https://[fe80::1]/hook",
            "https://[ff02::1]/hook",
            "https://224.0.0.1/hook",
            "https://192.0.2.1/hook",
            "http://example.com/hook",
            "http://93.184.215.14/hook",
            "ftp://example.com/hook",
            "file:///etc/passwd",
            "gopher://example.com/",
            "javascript:alert(1)",
            "https://user:pass@example.com/hook",
            "https://user@example.com/hook",
            "not a url",
            "",
            "https://",
        ] {
            assert!(p.parse(url).is_err(), "{url} should be refused");
        }
        assert!(p.parse(&format!("https://example.com/{}", "a".repeat(MAX_URL_LEN))).is_err());
    }

    #[test]
    fn urls_accepted() {
        let p = policy("");
        for url in ["https://example.com/hook", "https://93.184.215.14:8443/x?y=1", "https://[2606:4700::1111]/"] {
            assert!(p.parse(url).is_ok(), "{url} should be accepted: {:?}", p.parse(url));
        }
        let normalised = p.parse("HTTPS://Example.COM:443/a").unwrap();
        assert_eq!(normalised.url.as_str(), "https://example.com/a");
    }

    #[test]
    fn the_allow_list_opens_its_networks_to_http_and_https() {
        let p = policy("127.0.0.0/8");
        assert!(p.parse("http://127.0.0.1:9000/hook").is_ok());
        assert!(p.parse("https://127.0.0.1:9000/hook").is_ok());
        assert!(p.parse("http://[::ffff:127.0.0.1]:9000/hook").is_ok());
        // localhost is also ::1, which the list does not hold.
        assert!(p.parse("http://localhost:9000/hook").is_err());
        assert!(policy("127.0.0.0/8,::1").parse("http://localhost:9000/hook").is_ok());
        assert!(p.parse("https://10.0.0.1/hook").is_err());
        assert!(p.parse("http://93.184.215.14/hook").is_err());
        assert!(p.parse("https://93.184.215.14/hook").is_ok());
        assert_eq!(p.permits("127.0.0.2".parse().unwrap(), Scheme::Http), Ok(()));
        assert!(p.permits("8.8.8.8".parse().unwrap(), Scheme::Http).is_err());
        assert!(p.permits("::1".parse().unwrap(), Scheme::Https).is_err());
    }

    #[tokio::test]
    async fn names_are_checked_by_what_they_resolve_to() {
        let p = policy("");
        // `.invalid` never resolves (and asks no DNS server): accepted, it fails at delivery.
        assert!(p.check("https://hooks.example.invalid/x").await.is_ok());
        assert!(p.resolve_permitted("hooks.example.invalid", Scheme::Https).await.is_err());
        let refused = p.resolve_permitted("localhost", Scheme::Https).await.unwrap_err();
        assert!(refused.contains("loopback"), "{refused}");
        let allowed = policy("127.0.0.0/8").resolve_permitted("localhost", Scheme::Http).await.unwrap();
        assert_eq!(allowed, vec!["127.0.0.1:0".parse().unwrap()]);
        // A plain http name that cannot be shown to be in the allow-list is refused.
        assert!(policy("127.0.0.0/8").check("http://hooks.example.invalid/x").await.is_err());
    }

    #[test]
    fn literal_addresses_are_checked_at_connection_time() {
        let p = policy("");
        let url = Url::parse("https://10.0.0.1/hook").unwrap();
        assert!(p.literal(&url, Scheme::Https).is_err());
        let name = Url::parse("https://example.com/hook").unwrap();
        assert!(p.literal(&name, Scheme::Https).is_ok());
    }
}
