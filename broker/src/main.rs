//! `moldau-broker`: runs one broker. With no flags it serves Kafka on
//! 127.0.0.1:9092 with its data in `./moldau-data`.

use clap::Parser;
use moldau_broker::config::Cli;
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.check_config {
        std::process::exit(check_config(&cli));
    }
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
    if let Err(e) = runtime.block_on(moldau_broker::server::run(cli, rx, true)) {
        // One line, and the last: what Kubernetes keeps of a failed
        // container's log (FallbackToLogsOnError) says why it stopped.
        tracing::error!(error = %format!("{e:#}"), "the broker cannot run");
        std::process::exit(1);
    }
    Ok(())
}

/// `--check-config`: prints each problem of the properties, or that they
/// are fine; the exit code says which (0 fine, 1 problems).
fn check_config(cli: &Cli) -> i32 {
    let props =
        match moldau_broker::config::load_properties(cli.config_file.as_deref(), &cli.overrides) {
            Ok(props) => props,
            Err(e) => {
                eprintln!("broker config: {e}");
                return 1;
            }
        };
    let problems = moldau_broker::config_check::check(&props);
    for p in &problems {
        eprintln!("broker config: {p}");
    }
    if problems.is_empty() {
        println!("broker config OK ({} properties)", props.len());
        0
    } else {
        1
    }
}
