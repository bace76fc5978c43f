//! `logstamp serve`: the JSON API and the log explorer page, until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use logstamp::config::Sources;
use logstamp::serve::Server;

use super::ingest::termination;
use super::{UsageError, load_settings};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Listen here instead of serve.listen (port 0 takes a free port, which the log names).
    #[arg(long, value_name = "ADDRESS")]
    listen: Option<SocketAddr>,
}

pub fn run(args: ServeArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let sources = match args.listen {
        Some(address) => sources.set("serve.listen", address),
        None => sources,
    };
    let settings = load_settings(&sources)?;
    if !settings.store.shards.is_empty() {
        return Err(UsageError::new(
            "store.shards",
            "logstamp serve reads one database, and store.shards lists several: query them \
             with `logstamp query`, or through the front server of `logstamp shards federate`",
        )
        .into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let stop = termination()?;
        let listen = settings.serve.listen;
        let server = Server::new(
            settings.serve.clone(),
            settings.serve_catalog(),
            &settings.mysql.url,
        )?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on serve.listen {listen}"))?;
        let address = listener.local_addr().context("reading the address bound")?;
        tracing::info!(%address, "serving the log explorer at http://{address}/ and the API at /api/");
        server.serve(listener)
            .with_graceful_shutdown(stop)
            .await
            .context("serving HTTP")?;
        Ok(ExitCode::SUCCESS)
    })
}
