//! `logstamp dev-broker`: the in-process Kafka cluster served over TCP until SIGINT or SIGTERM,
//! so any Kafka client (and `logstamp ingest`) can be tried without installing Kafka.
//!
//! librdkafka's mock broker always listens on a port the kernel picks. For `--port`, this
//! command listens on that port itself, forwards each connection to the broker, and has the
//! broker advertise the forwarding address, so clients never see the picked port.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

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
    let cluster = LocalCluster::start(1)?;
    cluster.create_topic(&args.topic, args.partitions)?;
    let broker: SocketAddr = cluster
        .bootstrap_servers()
        .parse()
        .context("the in-process broker's address")?;
    let address = match args.port {
        None => broker,
        Some(port) => {
            let wanted = SocketAddr::from(([127, 0, 0, 1], port));
            let listener = TcpListener::bind(wanted).await.map_err(|e| {
                UsageError::new("--port", format!("cannot listen on {wanted}: {e}"))
            })?;
            cluster.advertise(BROKER_ID, "127.0.0.1", port)?;
            tokio::spawn(forward(listener, broker));
            wanted
        }
    };
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

/// Forwards every connection to `listener` to the broker at `broker`.
async fn forward(listener: TcpListener, broker: SocketAddr) {
    loop {
        let mut client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(e) => {
                tracing::warn!("accepting a connection: {e}");
                // Out of file descriptors, say: give connections time to close.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let result = async {
                let mut upstream = TcpStream::connect(broker).await?;
                tokio::io::copy_bidirectional(&mut client, &mut upstream).await
            }
            .await;
            if let Err(e) = result {
                tracing::debug!("a forwarded connection ended: {e}");
            }
        });
    }
}
