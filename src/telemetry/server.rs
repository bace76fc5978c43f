//! The HTTP endpoints on `telemetry.listen`: `/metrics` (Prometheus text), `/health/live` (the
//! process answers) and `/health/ready` (what ready means is the command's: see [`Source`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer};
use tokio::net::TcpListener;
use tokio::sync::Mutex;

use super::ListenAddress;
use super::exporter::{Exporter, Histogram, TelemetryError};
use crate::kafka::CreateRedacted;
use crate::mysql;
use crate::mysql::MysqlUrl;

/// How long a readiness check waits for MySQL and for Kafka.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a readiness answer is given again without checking: requests in a burst share one
/// check, so `/health/ready` cannot be used to open MySQL connections at will.
const READY_CACHED_FOR: Duration = Duration::from_secs(1);

/// What a long-running command serves: its metrics, and whether it is ready.
pub trait Source: Send + Sync + 'static {
    /// The histograms the command records as they happen, with their buckets.
    const HISTOGRAMS: &'static [Histogram] = &[];
    /// Describes the command's metrics to the recorder (their help text and units).
    fn describe();
    /// The Prometheus text of everything, the command's totals read now.
    fn render(&self, exporter: &Exporter) -> String;
    /// `Ok` when ready, else the first reason it is not.
    fn ready(&self) -> impl Future<Output = Result<(), String>> + Send;
}

/// Binds `telemetry.listen` and logs the address it got (port 0 takes a free one). One address
/// in use (or not local) is a clear error, before the command starts its work. A range takes
/// its first free port; when siblings on the host hold them all, any free port, with a warning
/// (the service-ID lease records where a worker serves).
pub async fn bind(listen: ListenAddress) -> Result<TcpListener, TelemetryError> {
    for address in listen.candidates() {
        match TcpListener::bind(address).await {
            Ok(listener) => return Ok(serving(listener)),
            Err(e) if listen.is_range() && e.kind() == std::io::ErrorKind::AddrInUse => {}
            Err(e) => return Err(listen_error(address, e)),
        }
    }
    let any = SocketAddr::new(listen.ip, 0);
    let listener = TcpListener::bind(any)
        .await
        .map_err(|e| listen_error(any, e))?;
    tracing::warn!(
        range = %listen,
        "every port of telemetry.listen is in use: serving on a free port instead"
    );
    Ok(serving(listener))
}

/// How others reach a server bound to `local`: an unspecified IP (`0.0.0.0`, `::`) is this
/// host's name.
pub fn advertised(local: SocketAddr, host: &str) -> String {
    if local.ip().is_unspecified() {
        format!("{host}:{}", local.port())
    } else {
        local.to_string()
    }
}

fn serving(listener: TcpListener) -> TcpListener {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving /metrics, /health/live and /health/ready");
    }
    listener
}

fn listen_error(address: SocketAddr, error: std::io::Error) -> TelemetryError {
    TelemetryError::Listen {
        address: address.to_string(),
        reason: if error.kind() == std::io::ErrorKind::AddrInUse {
            "the address is already in use (is another logstamp process running here? a port \
             range such as 127.0.0.1:9464-9495 lets workers share a host)"
                .into()
        } else {
            error.to_string()
        },
    }
}

struct Served<S> {
    exporter: Exporter,
    source: S,
    /// The last readiness answer and when it was made. Held across a check, so at most one
    /// runs at a time and the requests that waited for it get its answer.
    last_ready: Mutex<Option<(Instant, Result<(), String>)>>,
}

/// Serves the endpoints on `listener` for as long as the returned task runs.
pub fn serve<S: Source>(
    listener: TcpListener,
    exporter: Exporter,
    source: S,
) -> tokio::task::JoinHandle<()> {
    S::describe();
    let served = Arc::new(Served {
        exporter,
        source,
        last_ready: Mutex::new(None),
    });
    let app = Router::new()
        .route("/metrics", get(metrics::<S>))
        .route("/health/live", get(|| async { "live\n" }))
        .route("/health/ready", get(ready::<S>))
        .with_state(served);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("the telemetry server stopped: {e}");
        }
    })
}

async fn metrics<S: Source>(
    State(served): State<Arc<Served<S>>>,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    (
        StatusCode::OK,
        [("content-type", "text/plain; version=0.0.4")],
        served.source.render(&served.exporter),
    )
}

/// 200 `ready`, or 503 with the first reason it is not.
async fn ready<S: Source>(State(served): State<Arc<Served<S>>>) -> (StatusCode, String) {
    // In a task of its own, so a client hanging up mid-check neither abandons the check nor
    // lets another start beside it.
    let answer = tokio::spawn(async move { shared_readiness(&served).await })
        .await
        .unwrap_or_else(|e| Err(format!("the readiness check failed: {e}")));
    match answer {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

/// The source's readiness, checked at most once at a time and at most once per
/// [`READY_CACHED_FOR`].
async fn shared_readiness<S: Source>(served: &Served<S>) -> Result<(), String> {
    let mut last = served.last_ready.lock().await;
    if let Some((at, answer)) = last.as_ref()
        && at.elapsed() < READY_CACHED_FOR
    {
        return answer.clone();
    }
    let answer = served.source.ready().await;
    *last = Some((Instant::now(), answer.clone()));
    answer
}

/// Whether MySQL at `url` answers a ping within [`PROBE_TIMEOUT`]; the error is the readiness reason.
pub async fn mysql_answers(url: &MysqlUrl) -> Result<(), String> {
    let probe = async {
        let mut conn = mysql::connect(url).await.map_err(|e| e.to_string())?;
        let pinged = mysql_async::prelude::Queryable::ping(&mut conn).await;
        let _ = conn.disconnect().await;
        pinged.map_err(|e| e.to_string())
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {PROBE_TIMEOUT:?}")))
        .map_err(|reason| format!("MySQL does not answer: {reason}"))
}

/// A Kafka client of its own for asking a cluster for metadata: it answers only if a broker
/// does.
#[derive(Clone)]
pub struct KafkaProbe {
    client: Option<Arc<BaseProducer>>,
}

impl KafkaProbe {
    /// A probe with `config`'s brokers and security settings. A client that cannot be made is
    /// logged, and the probe then reports Kafka as not answering.
    pub fn new(config: &ClientConfig) -> KafkaProbe {
        let client = match config.create_redacted::<BaseProducer>() {
            Ok(client) => Some(Arc::new(client)),
            Err(e) => {
                tracing::warn!("readiness cannot check Kafka (it reports not ready): {e}");
                None
            }
        };
        KafkaProbe { client }
    }

    /// Whether a broker answers a metadata request within [`PROBE_TIMEOUT`].
    pub async fn answers(&self) -> Result<(), String> {
        let client = self
            .client
            .clone()
            .ok_or_else(|| "no Kafka client".to_string())?;
        tokio::task::spawn_blocking(move || {
            client
                .client()
                .fetch_metadata(None, PROBE_TIMEOUT)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_address_is_advertised_by_the_host_name() {
        assert_eq!(advertised("0.0.0.0:9464".parse().unwrap(), "w1"), "w1:9464");
        assert_eq!(advertised("[::]:9465".parse().unwrap(), "w1"), "w1:9465");
        assert_eq!(
            advertised("10.1.2.3:9464".parse().unwrap(), "w1"),
            "10.1.2.3:9464"
        );
        assert_eq!(
            advertised("[::1]:9464".parse().unwrap(), "w1"),
            "[::1]:9464"
        );
    }
}
