//! Which HTTP proxy a client takes to the API server, decided as kubectl decides it (Go's
//! `http.ProxyFromEnvironment`, `golang.org/x/net/http/httpproxy`): `HTTPS_PROXY` (or
//! `https_proxy`) for an `https` server, `HTTP_PROXY` for an `http` one, a proxy address without
//! a scheme taken as `http://`; never for `localhost` or a loopback address; never for a host
//! `NO_PROXY` (or `no_proxy`) names: `*`, an IP address, a CIDR range, a domain (itself and its
//! subdomains; with a leading `.` or `*.`, its subdomains only), each optionally with `:port`.
//! A `proxy-url` in the kubeconfig wins over the environment, as in kubectl.
//!
//! kube-rs (5.0) reads `HTTPS_PROXY` but compares `NO_PROXY` with the proxy's own address rather
//! than the API server's, and sends loopback traffic through the proxy, so a user with a proxy
//! for the internet and `NO_PROXY` for the cluster could reach neither: hence this module.

use std::net::IpAddr;

/// The proxy (`http://host:port`) for a request to `host` (`port`, `scheme`), given the
/// environment `var`; `None` to go direct.
pub(crate) fn proxy_for(
    scheme: &str,
    host: &str,
    port: Option<u16>,
    var: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let first = |names: [&str; 2]| {
        names
            .into_iter()
            .find_map(|name| var(name).filter(|v| !v.trim().is_empty()))
    };
    let proxy = match scheme {
        "https" => first(["HTTPS_PROXY", "https_proxy"]),
        "http" => first(["HTTP_PROXY", "http_proxy"]),
        _ => None,
    }?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) {
        return None;
    }
    let port = port.unwrap_or(if scheme == "https" { 443 } else { 80 });
    if first(["NO_PROXY", "no_proxy"]).is_some_and(|list| bypasses(&list, &host, port)) {
        return None;
    }
    let proxy = proxy.trim();
    Some(if proxy.contains("://") {
        proxy.to_owned()
    } else {
        format!("http://{proxy}")
    })
}

/// Whether `NO_PROXY`'s `list` names `host` (lower case) on `port`.
fn bypasses(list: &str, host: &str, port: u16) -> bool {
    let ip = host.parse::<IpAddr>().ok();
    list.split(',')
        .map(|entry| entry.trim().to_ascii_lowercase())
        .filter(|entry| !entry.is_empty())
        .any(|entry| {
            if entry == "*" {
                return true;
            }
            if let (Ok(net), Some(ip)) = (entry.parse::<ipnet::IpNet>(), ip) {
                return net.contains(&ip);
            }
            let (name, entry_port) = split_port(&entry);
            if entry_port.is_some_and(|p| p != port) {
                return false;
            }
            if let Ok(entry_ip) = name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
            {
                return ip == Some(entry_ip);
            }
            match name.strip_prefix("*.").or_else(|| name.strip_prefix('.')) {
                Some(domain) => host.ends_with(&format!(".{domain}")),
                None => host == name || host.ends_with(&format!(".{name}")),
            }
        })
}

/// `host:port` as (host, port); an IPv6 address without brackets has no port.
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if (entry.matches(':').count() == 1 || entry.starts_with('['))
        && let Some((host, port)) = entry.rsplit_once(':')
        && let Ok(port) = port.parse()
    {
        return (host, Some(port));
    }
    (entry, None)
}

/// Sets `config`'s proxy from the environment `var` reads (the binaries pass the process's),
/// as [`proxy_for`] decides it, unless the kubeconfig named one of its own (`proxy-url`).
pub fn apply_environment(config: &mut kube::Config, var: impl Fn(&str) -> Option<String>) {
    // kube took `HTTPS_PROXY` as it is, or dropped it for a `NO_PROXY` that named the proxy;
    // anything else came from the kubeconfig.
    let from_environment = ["HTTPS_PROXY", "https_proxy"]
        .into_iter()
        .find_map(|name| var(name).filter(|v| !v.trim().is_empty()))
        .and_then(|raw| raw.parse().ok());
    if config.proxy_url.is_some() && config.proxy_url != from_environment {
        return;
    }
    let url = &config.cluster_url;
    config.proxy_url = proxy_for(
        url.scheme_str().unwrap_or("https"),
        url.host().unwrap_or_default(),
        url.port_u16(),
        var,
    )
    .and_then(|proxy| proxy.parse().ok());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn an_https_server_goes_through_https_proxy_and_a_bare_address_is_http() {
        let vars = [("HTTPS_PROXY", "proxy.corp:3128")];
        assert_eq!(
            proxy_for("https", "api.example.com", Some(443), env(&vars)).as_deref(),
            Some("http://proxy.corp:3128")
        );
        let lower = [("https_proxy", "http://p:8080")];
        assert_eq!(
            proxy_for("https", "10.0.0.1", None, env(&lower)).as_deref(),
            Some("http://p:8080")
        );
        assert_eq!(proxy_for("https", "api.example.com", None, env(&[])), None);
    }

    #[test]
    fn loopback_never_goes_through_a_proxy() {
        let vars = [("HTTPS_PROXY", "http://p:3128")];
        for host in ["localhost", "127.0.0.1", "127.1.2.3", "[::1]"] {
            assert_eq!(
                proxy_for("https", host, Some(6443), env(&vars)),
                None,
                "{host}"
            );
        }
    }

    #[test]
    fn no_proxy_names_hosts_domains_addresses_ranges_and_ports_as_kubectl_reads_them() {
        let direct = |no_proxy: &str, host: &str, port: u16| {
            let vars = [("HTTPS_PROXY", "http://p:3128"), ("NO_PROXY", no_proxy)];
            proxy_for("https", host, Some(port), env(&vars)).is_none()
        };
        assert!(direct("*", "anything.example", 443));
        assert!(direct("example.com", "example.com", 443));
        assert!(direct("example.com", "api.example.com", 443));
        assert!(!direct("example.com", "notexample.com", 443));
        assert!(direct(".example.com", "api.example.com", 443));
        assert!(!direct(".example.com", "example.com", 443));
        assert!(direct("*.example.com", "api.example.com", 443));
        assert!(direct("10.0.0.0/8", "10.1.2.3", 443));
        assert!(!direct("10.0.0.0/8", "192.168.0.1", 443));
        assert!(direct("192.168.0.1", "192.168.0.1", 443));
        assert!(direct("a.example:6443", "a.example", 6443));
        assert!(!direct("a.example:6443", "a.example", 443));
        assert!(direct(" foo , EXAMPLE.com ", "api.example.com", 443));
        assert!(direct("fd00::/8", "fd00::1", 443));
        assert!(!direct("other.example", "api.example.com", 443));
    }

    #[test]
    fn a_kubeconfigs_own_proxy_wins_and_the_environment_follows_no_proxy() {
        let mut config = kube::Config::new("https://api.example.com:6443".parse().expect("url"));
        let vars = [
            ("HTTPS_PROXY", "http://p:3128"),
            ("NO_PROXY", ".example.com"),
        ];
        // As kube leaves it: the environment's proxy, whatever NO_PROXY says.
        config.proxy_url = Some("http://p:3128".parse().expect("url"));
        apply_environment(&mut config, env(&vars));
        assert_eq!(config.proxy_url, None);
        config.proxy_url = Some("http://own:1080".parse().expect("url"));
        apply_environment(&mut config, env(&vars));
        assert_eq!(
            config.proxy_url.map(|u| u.to_string()).as_deref(),
            Some("http://own:1080/")
        );
        let mut config = kube::Config::new("https://api.corp.internal".parse().expect("url"));
        apply_environment(&mut config, env(&vars));
        assert_eq!(
            config.proxy_url.map(|u| u.to_string()).as_deref(),
            Some("http://p:3128/")
        );
    }
}
