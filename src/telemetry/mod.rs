//! Logging: `tracing` to stderr, filtered by `RUST_LOG` or `telemetry.log_level`, as text or JSON
//! (stdout is left to commands' own output); Prometheus metrics and health checks over HTTP on
//! `telemetry.listen` (`exporter`, `server`). Generic: what a command serves there is its own
//! [`server::Source`] (`ingest::metrics`, `relay::metrics`).

pub mod exporter;
pub mod server;

use std::fmt;
use std::io::IsTerminal;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;

use crate::settings::{SettingError, as_text};

/// Installs the global subscriber. Calling it again (tests, embedded use) keeps the first one.
pub fn init(settings: &TelemetrySettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.log_level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal, not in files and log collectors.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match settings.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The `[telemetry]` settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    pub log_format: LogFormat,
    pub log_level: String,
    #[serde(with = "as_text")]
    pub listen: ListenAddress,
}

/// Where `/metrics` and the health checks are served: one address (`127.0.0.1:9464`; port 0
/// takes a free one), or a range of ports to take the first free one of
/// (`0.0.0.0:9464-9495`), so that workers sharing a host share one setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddress {
    pub ip: IpAddr,
    pub first_port: u16,
    pub last_port: u16,
}

impl ListenAddress {
    /// The addresses to try, in order.
    pub fn candidates(&self) -> impl Iterator<Item = SocketAddr> + use<> {
        let ip = self.ip;
        (self.first_port..=self.last_port).map(move |port| SocketAddr::new(ip, port))
    }

    pub fn is_range(&self) -> bool {
        self.first_port != self.last_port
    }
}

impl From<SocketAddr> for ListenAddress {
    fn from(address: SocketAddr) -> ListenAddress {
        ListenAddress {
            ip: address.ip(),
            first_port: address.port(),
            last_port: address.port(),
        }
    }
}

impl FromStr for ListenAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<ListenAddress, String> {
        let text = text.trim();
        let (host, ports) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?} is not host:port or host:first-last"))?;
        let ip: IpAddr = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|e| format!("{host:?} is not an IP address: {e}"))?;
        let port = |p: &str| {
            p.trim()
                .parse::<u16>()
                .map_err(|e| format!("port {p:?}: {e}"))
        };
        let (first_port, last_port) = match ports.split_once('-') {
            Some((first, last)) => (port(first)?, port(last)?),
            None => (port(ports)?, port(ports)?),
        };
        if first_port > last_port || (first_port == 0 && last_port != 0) {
            return Err(format!(
                "ports {first_port}-{last_port}: a range goes from a lower port to a higher one, above 0"
            ));
        }
        Ok(ListenAddress {
            ip,
            first_port,
            last_port,
        })
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = SocketAddr::new(self.ip, self.first_port);
        if self.is_range() {
            write!(f, "{first}-{}", self.last_port)
        } else {
            write!(f, "{first}")
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl TelemetrySettings {
    pub fn validate(&self) -> Result<(), SettingError> {
        EnvFilter::try_new(&self.log_level)
            .map(|_| ())
            .map_err(|e| SettingError::new("telemetry.log_level", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_are_one_port_or_a_range() {
        let one: ListenAddress = "127.0.0.1:9464".parse().unwrap();
        assert!(!one.is_range());
        assert_eq!(one.to_string(), "127.0.0.1:9464");
        let range: ListenAddress = "0.0.0.0:9464-9466".parse().unwrap();
        assert_eq!(
            range.candidates().map(|a| a.port()).collect::<Vec<_>>(),
            [9464, 9465, 9466]
        );
        assert_eq!(range.to_string(), "0.0.0.0:9464-9466");
        let v6: ListenAddress = "[::1]:9464-9465".parse().unwrap();
        assert_eq!(v6.to_string(), "[::1]:9464-9465");
        assert_eq!(v6.to_string().parse::<ListenAddress>().unwrap(), v6);
        for bad in [
            "9464",
            "localhost:9464",
            "127.0.0.1:9466-9464",
            "127.0.0.1:0-5",
            "127.0.0.1:70000",
        ] {
            assert!(bad.parse::<ListenAddress>().is_err(), "{bad}");
        }
    }
}
