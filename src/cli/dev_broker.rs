//! `logstamp dev-broker`: the in-process Kafka cluster served over TCP until SIGINT or SIGTERM,
//! so Kafka clients (the tests run librdkafka and kafka-python) and `logstamp ingest` can be
//! tried without installing Kafka.
//!
//! librdkafka's mock broker always listens on a port the kernel picks. This command listens on
//! its own (`--port`, or one the system picks), forwards each connection to the broker through
//! [`proxy`], which fills the mock's gaps for other clients, and has the broker advertise the
//! forwarding address, so clients never reach the mock directly.

mod proxy;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use serde_json::json;
use tokio::net::TcpListener;

use logstamp::config::Sources;
use logstamp::ingest::local_cluster::LocalCluster;

use super::ingest::termination;
use super::output::Output;
use super::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct DevBrokerArgs {
    /// Port on 127.0.0.1 to serve on [default: one the system picks].
    #[arg(long)]
    port: Option<u16>,
    /// Partitions of the topic created at start.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Topic created at start (others are created when first used).
    #[arg(long, default_value = "logs")]
    topic: String,
}

/// The cluster's one broker.
const BROKER_ID: i32 = 1;

pub fn run(args: DevBrokerArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    load_settings(&sources)?;
    if args.partitions < 1 {
        return Err(UsageError::new("--partitions", "must be at least 1").into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: DevBrokerArgs) -> anyhow::Result<()> {
    let stop = termination()?;
    let cluster = Arc::new(LocalCluster::start(1)?);
    cluster.create_topic(&args.topic, args.partitions)?;
    // Newer ApiVersions requests are the forwarder's to answer.
    cluster.limit_api_versions(proxy::API_VERSIONS, 0, proxy::API_VERSIONS_MAX)?;
    let broker: SocketAddr = cluster
        .bootstrap_servers()
        .parse()
        .context("the in-process broker's address")?;
    let wanted = SocketAddr::from(([127, 0, 0, 1], args.port.unwrap_or(0)));
    let listener = TcpListener::bind(wanted)
        .await
        .map_err(|e| UsageError::new("--port", format!("cannot listen on {wanted}: {e}")))?;
    let address = listener.local_addr().context("the forwarding address")?;
    cluster.advertise(BROKER_ID, "127.0.0.1", address.port())?;
    tokio::spawn(proxy::serve(listener, broker, cluster.clone()));
    let mut out = Output::new();
    out.json(&json!({
        "bootstrap_servers": address.to_string(),
        "topic": args.topic,
        "partitions": args.partitions,
    }))?;
    out.flush()?;
    eprintln!(
        "Kafka-protocol broker at {address} until Ctrl-C; for example:\n  \
         LOGSTAMP__KAFKA__BROKERS={address} LOGSTAMP__KAFKA__TOPICS={} logstamp ingest\n\
         It keeps only the last 5 MB (or 100,000 messages) of each partition, in memory.",
        args.topic
    );
    stop.await;
    Ok(())
}
