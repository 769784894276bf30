//! The `weir` command: `weir` or `weir serve` starts the server.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use weir::engine::Engine;
use weir::server;

#[derive(Parser, Debug)]
#[command(
    name = "weir",
    version,
    about = "A streaming SQL database server (Postgres wire protocol)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeOptions,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start the server (the default).
    Serve(ServeOptions),
}

#[derive(clap::Args, Debug, Clone)]
struct ServeOptions {
    /// Address to accept Postgres connections on.
    #[arg(long, env = "WEIR_LISTEN", default_value = "127.0.0.1:5455")]
    listen: String,
    /// Directory holding all durable state.
    #[arg(long, env = "WEIR_DATA_DIR", default_value = "./weir-data")]
    data_dir: PathBuf,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let options = match cli.command {
        Some(Command::Serve(options)) => options,
        None => cli.serve,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("weir: cannot start the runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(serve(options));
    // Connections still running a statement must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{}", error.message);
            if let Some(hint) = &error.hint {
                tracing::error!("hint: {hint}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(options: ServeOptions) -> weir::error::Result<()> {
    let engine = Engine::open(&options.data_dir).await?;
    let listener = server::bind(&options.listen).await?;
    let address = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(options.listen.clone());
    tracing::info!(
        listen = %address,
        data_dir = %options.data_dir.display(),
        "weir is ready; connect with: psql -h {} -p {} -U weir",
        address.rsplit_once(':').map_or("127.0.0.1", |(host, _)| host),
        address.rsplit_once(':').map_or("5455", |(_, port)| port),
    );
    server::serve(engine, listener, shutdown_signal()).await
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
