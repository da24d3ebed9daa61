//! `[http]`: where the daemon serves its status page and metrics.

use std::net::SocketAddr;

use serde::Deserialize;

/// See the commented default configuration for meanings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    pub listen: String,
    pub hosts: Vec<String>,
}

impl HttpConfig {
    /// The address to listen on; `None` when the server is off. An IP
    /// address and port only: a host name would make the daemon's start
    /// wait on a resolver, and say less plainly what is exposed.
    pub fn address(&self) -> Result<Option<SocketAddr>, String> {
        match self.listen.trim() {
            "" => Ok(None),
            text => text.parse().map(Some).map_err(|_| {
                format!(
                    "http.listen = {text:?}: expected an IP address and port, such as \
                     \"127.0.0.1:9184\" or \"[::1]:9184\" (empty: no server)"
                )
            }),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if let Some(bad) = self.hosts.iter().find(|h| {
            h.is_empty() || h.contains(|c: char| c.is_whitespace() || c == ':' || c == '/')
        }) {
            return Err(format!(
                "http.hosts: {bad:?} is not a host name (no port, no scheme), such as \"status.example.org\""
            ));
        }
        self.address().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_an_ip_and_a_port_or_nothing() {
        let at = |listen: &str| {
            HttpConfig {
                listen: listen.into(),
                hosts: Vec::new(),
            }
            .address()
        };
        assert_eq!(at(""), Ok(None));
        assert_eq!(
            at("127.0.0.1:9184"),
            Ok(Some(([127, 0, 0, 1], 9184).into()))
        );
        assert!(at("[::1]:80").is_ok_and(|a| a.is_some()));
        for bad in ["localhost:9184", "127.0.0.1", ":9184", "0.0.0.0:99999"] {
            assert!(at(bad).is_err(), "{bad}");
        }
    }
}
