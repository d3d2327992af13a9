//! `moldau-broker`: runs one broker. With no flags it serves Kafka on
//! 127.0.0.1:9092 with its data in `./moldau-data`.

use clap::Parser;
use moldau_broker::config::Cli;
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = EnvFilter::try_new(&cli.log).unwrap_or_else(|_| EnvFilter::new("info"));
    if cli.log_format == "json" {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .json()
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (_tx, rx) = tokio::sync::watch::channel(false);
    runtime.block_on(moldau_broker::server::run(cli, rx, true))
}
