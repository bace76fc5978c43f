//! The HTTP endpoints on `telemetry.listen`: `/metrics` (Prometheus text), `/health/live` (the
//! process answers) and `/health/ready` (the lease is held and MySQL and Kafka answer).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use rdkafka::producer::{BaseProducer, Producer};
use tokio::net::TcpListener;

use super::exporter::{Exporter, TelemetryError, WorkerView};
use crate::config::{MysqlUrl, Settings};
use crate::ingest::kafka;
use crate::store::db;
use crate::store::lease::LeaseStatus;

/// How long a readiness check waits for MySQL and for Kafka.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds `telemetry.listen`; an address in use (or not local) is a clear error, before the
/// worker starts.
pub async fn bind(listen: SocketAddr) -> Result<TcpListener, TelemetryError> {
    TcpListener::bind(listen)
        .await
        .map_err(|e| TelemetryError::Listen {
            address: listen.to_string(),
            reason: if e.kind() == std::io::ErrorKind::AddrInUse {
                "the address is already in use (is another worker running here?)".into()
            } else {
                e.to_string()
            },
        })
}

struct Served {
    exporter: Exporter,
    worker: WorkerView,
    mysql: MysqlUrl,
    /// A client of its own for asking Kafka for metadata: it answers only if a broker does.
    kafka: Option<BaseProducer>,
}

/// Serves the endpoints on `listener` for as long as the returned task runs.
pub fn serve(
    listener: TcpListener,
    exporter: Exporter,
    worker: WorkerView,
    settings: &Settings,
) -> tokio::task::JoinHandle<()> {
    let kafka = match kafka::producer_config(settings).create::<BaseProducer>() {
        Ok(client) => Some(client),
        Err(e) => {
            tracing::warn!("readiness cannot check Kafka (it reports not ready): {e}");
            None
        }
    };
    let served = Arc::new(Served {
        exporter,
        worker,
        mysql: settings.mysql.url.clone(),
        kafka,
    });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/health/live", get(|| async { "live\n" }))
        .route("/health/ready", get(ready))
        .with_state(served);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("the telemetry server stopped: {e}");
        }
    })
}

async fn metrics(
    State(served): State<Arc<Served>>,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    (
        StatusCode::OK,
        [("content-type", "text/plain; version=0.0.4")],
        served.exporter.render(&served.worker),
    )
}

/// 200 `ready`, or 503 with the first reason it is not.
async fn ready(State(served): State<Arc<Served>>) -> (StatusCode, String) {
    let lease = served.worker.lease.borrow().clone();
    let reason = match lease {
        LeaseStatus::Lost(reason) => Some(format!("the service-ID lease is lost: {reason}")),
        LeaseStatus::Held => match mysql_answers(&served.mysql).await {
            Err(reason) => Some(format!("MySQL does not answer: {reason}")),
            Ok(()) => kafka_answers(&served)
                .await
                .err()
                .map(|reason| format!("Kafka does not answer: {reason}")),
        },
    };
    match reason {
        None => (StatusCode::OK, "ready\n".into()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

async fn mysql_answers(url: &MysqlUrl) -> Result<(), String> {
    let probe = async {
        let mut conn = db::connect(url).await.map_err(|e| e.to_string())?;
        let pinged = mysql_async::prelude::Queryable::ping(&mut conn).await;
        let _ = conn.disconnect().await;
        pinged.map_err(|e| e.to_string())
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {PROBE_TIMEOUT:?}")))
}

async fn kafka_answers(served: &Arc<Served>) -> Result<(), String> {
    let served = served.clone();
    tokio::task::spawn_blocking(move || {
        let client = served
            .kafka
            .as_ref()
            .ok_or_else(|| "no Kafka client".to_string())?;
        client
            .client()
            .fetch_metadata(None, PROBE_TIMEOUT)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}
