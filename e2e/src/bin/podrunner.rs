//! `moldau-podrunner`: runs the Pods bound to one Node as host processes.
//! See `moldau_e2e::runner` and e2e/README.md.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn,hyper=warn,tower=warn".into()),
        )
        .init();
    let args = moldau_e2e::runner::Args::parse();
    moldau_e2e::runner::run(args).await
}
