//! The `weir` command: `weir` or `weir serve` starts the server; `weir
//! bench` measures materialized-view throughput.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use weir::bench::{Scenario, Workload};
use weir::engine::Engine;
use weir::server;

/// mimalloc rather than glibc's malloc (docs/decisions.md, "The server
/// allocates with mimalloc"); `--features system-allocator` builds with
/// the system's, for heap profilers (heaptrack) that watch malloc.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Measure events/s appended through materialized views, in-process.
    Bench(BenchOptions),
}

#[derive(clap::Args, Debug, Clone)]
struct ServeOptions {
    /// Address to accept Postgres connections on.
    #[arg(long, env = "WEIR_LISTEN", default_value = "127.0.0.1:5455")]
    listen: String,
    /// Directory holding all durable state.
    #[arg(long, env = "WEIR_DATA_DIR", default_value = "./weir-data")]
    data_dir: PathBuf,
    /// How often materialized views' running state is checkpointed (0: never).
    #[arg(long, env = "WEIR_CHECKPOINT_INTERVAL_MS", default_value_t = weir::engine::checkpoint::DEFAULT_CHECKPOINT_INTERVAL_MS)]
    checkpoint_interval_ms: u64,
    /// Memory for the state store's page cache, in MiB (rows and view rows
    /// live on disk; this much of them is cached).
    #[arg(long, env = "WEIR_STORE_CACHE_MB", default_value_t = weir::state::DEFAULT_CACHE_BYTES / (1024 * 1024))]
    store_cache_mb: u64,
    /// The most memory materialized views' running state may hold together
    /// (e.g. 2GB); a statement that would pass it fails with an error
    /// naming the view instead of the process running out of memory.
    /// Default: no limit.
    #[arg(long, env = "WEIR_MEMORY_LIMIT", value_parser = parse_memory_limit)]
    memory_limit: Option<u64>,
    /// How much of its state each top-N or OVER operator keeps in memory
    /// (e.g. 64MB); past it, the operator writes what changed to disk and
    /// reads state back as rows need it.
    #[arg(long, env = "WEIR_OPERATOR_CACHE_SIZE", default_value = "64MB", value_parser = parse_memory_limit)]
    operator_cache_size: u64,
    /// How many key partitions an aggregate updates in parallel, each on a
    /// thread of its own (1 to 64). Default: one per core for SESSION
    /// aggregates, 1 for window aggregates, where more is slower on 2
    /// cores (docs/benchmarks.md). Results do not depend on it, and it may
    /// change between restarts.
    #[arg(long, env = "WEIR_PARALLELISM", value_parser = clap::value_parser!(u64).range(1..=64))]
    parallelism: Option<u64>,
    /// The most client connections logged in at once; one more is refused
    /// with 53300, as Postgres does (0: no limit). Connections still
    /// logging in have as many slots again of their own.
    #[arg(long, env = "WEIR_MAX_CONNECTIONS", default_value_t = 100)]
    max_connections: u64,
    /// How many of --max-connections only superusers may take, so an
    /// administrator can still log in when clients hold every other slot.
    #[arg(long, env = "WEIR_SUPERUSER_RESERVED_CONNECTIONS", default_value_t = 3)]
    superuser_reserved_connections: u64,
    /// A connection that has not logged in this long after it was accepted
    /// is closed (Postgres's authentication_timeout).
    #[arg(long, env = "WEIR_AUTHENTICATION_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    authentication_timeout_ms: u64,
    /// The largest Query, Parse or Bind message a client may send (at most
    /// 1GB, Postgres's limit); a larger one ends its connection with 08P01.
    /// Bulk data belongs in COPY, whose messages are not limited by it.
    #[arg(long, env = "WEIR_MAX_MESSAGE_SIZE", default_value = "64MB", value_parser = parse_memory_limit)]
    max_message_size: u64,
    /// Address to serve Prometheus metrics on (`GET /metrics`), e.g.
    /// 127.0.0.1:9187. Default: not served. They carry no secrets but have
    /// no authentication either: keep them on loopback or a private network.
    #[arg(long, env = "WEIR_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Sets the password of the superuser `weir` at start (stored as a
    /// SCRAM-SHA-256 secret). Needed to listen on a non-loopback address.
    #[arg(long, env = "WEIR_SUPERUSER_PASSWORD", hide_env_values = true)]
    superuser_password: Option<String>,
    /// Whether clients on a loopback address log in without a password.
    #[arg(long, env = "WEIR_TRUST_LOOPBACK", default_value_t = true, action = clap::ArgAction::Set)]
    trust_loopback: bool,
    /// Lets every client log in without a password, from anywhere. Only
    /// for networks where every host is trusted.
    #[arg(long, env = "WEIR_INSECURE_TRUST_ALL")]
    insecure_trust_all: bool,
    /// PEM certificate chain for TLS (with --tls-key).
    #[arg(long, env = "WEIR_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for TLS (with --tls-cert).
    #[arg(long, env = "WEIR_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Refuses clients that do not use TLS (needs --tls-cert).
    #[arg(long, env = "WEIR_REQUIRE_TLS", requires = "tls_cert")]
    require_tls: bool,
}

fn parse_memory_limit(text: &str) -> Result<u64, String> {
    weir::session::parse_memory_size(text)
        .ok_or_else(|| format!("{text:?} is not a memory size such as 512MB or 2GB"))
}

#[derive(clap::Args, Debug, Clone)]
struct BenchOptions {
    /// Events appended per scenario.
    #[arg(long, default_value_t = 2_000_000)]
    rows: u64,
    /// Events per append (one durable commit each).
    #[arg(long, default_value_t = 100_000)]
    batch_rows: usize,
    /// Which scenario to run; `all` runs the baseline (no view) and the
    /// window scenarios; `keyed` the side-by-side queries (keyed by
    /// auction, with COUNT DISTINCT); `recovery` times restarts after a
    /// bulk load.
    #[arg(long, value_enum, default_value_t = ScenarioChoice::All)]
    scenario: ScenarioChoice,
    /// How often the events/s scenarios checkpoint in the background while
    /// appending (0: never); the recovery scenario checkpoints once, by hand.
    #[arg(long, default_value_t = 0)]
    checkpoint_interval_ms: u64,
    /// Directory for the scenarios' databases (must not hold one already);
    /// by default a fresh directory under the system temp dir, removed afterwards.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Key partitions an aggregate updates in parallel (as the server's
    /// --parallelism).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
    parallelism: Option<u64>,
    /// A Kafka broker (host:port) for `--scenario sources` to also time a
    /// Kafka source: the bids go to a new topic there first.
    #[arg(long)]
    kafka: Option<String>,
    /// When the window views emit: `close` (EMIT ON WINDOW CLOSE, the
    /// fastest) or `update` (what a view does by default).
    #[arg(long, value_enum, default_value_t = EmitChoice::Close)]
    emit: EmitChoice,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum EmitChoice {
    Close,
    Update,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum ScenarioChoice {
    All,
    Baseline,
    Tumble,
    Hop,
    Cumulate,
    Session,
    ManySessions,
    /// The three side-by-side queries over Nexmark-shaped bids.
    Keyed,
    KeyedTumble,
    KeyedHop,
    KeyedSession,
    /// The Nexmark queries that read bids only (q0, q1, q2, q5, q7, q11).
    Nexmark,
    Recovery,
    /// The Nexmark generator alone, and a nexmark source into a view.
    Sources,
}

impl ScenarioChoice {
    fn scenarios(self) -> Vec<Scenario> {
        match self {
            ScenarioChoice::All => Scenario::THROUGHPUT.to_vec(),
            ScenarioChoice::Baseline => vec![Scenario::Baseline],
            ScenarioChoice::Tumble => vec![Scenario::Tumble],
            ScenarioChoice::Hop => vec![Scenario::Hop],
            ScenarioChoice::Cumulate => vec![Scenario::Cumulate],
            ScenarioChoice::Session => vec![Scenario::Session],
            ScenarioChoice::ManySessions => vec![Scenario::ManySessions],
            ScenarioChoice::Keyed => Scenario::KEYED.to_vec(),
            ScenarioChoice::KeyedTumble => vec![Scenario::KeyedTumble],
            ScenarioChoice::KeyedHop => vec![Scenario::KeyedHop],
            ScenarioChoice::KeyedSession => vec![Scenario::KeyedSession],
            ScenarioChoice::Nexmark => Scenario::NEXMARK.to_vec(),
            ScenarioChoice::Recovery => vec![Scenario::Recovery],
            ScenarioChoice::Sources => Vec::new(),
        }
    }
}

/// glibc gives threads that allocate at once their own heap arenas (up to
/// eight per core) and keeps freed memory in each; with tokio's workers,
/// blocking threads and sled's, a 10 M-row load peaked at 414 (TUMBLE),
/// 686 (HOP), 581 MB (SESSION) with 229 MB of live heap for TUMBLE. One
/// arena: 277, 532, 371 MB at the same speed, while one thread did the
/// view work. Operator partitions work on threads of their own at once,
/// and sharing one arena made two partitions no faster than one (keyed
/// SESSION: 1.02 M events/s vs 1.33 M with an arena each), so there is one
/// arena per partition thread plus one for the rest, which costs 50–80 MB
/// of peak memory on a 10 M-row COPY (docs/benchmarks.md; a fixed mmap
/// threshold took that back but made keyed HOP 18 % slower). An explicit
/// `MALLOC_ARENA_MAX` is left to glibc.
/// Runs before any thread exists, as mallopt requires.
fn limit_malloc_arenas(partitions: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let arenas = if partitions > 1 { partitions + 1 } else { 1 };
        // SAFETY: called in main before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas as i32);
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve(cli.serve));
    let parallelism = match &command {
        Command::Serve(options) => options.parallelism,
        Command::Bench(options) => options.parallelism,
    };
    if let Some(partitions) = parallelism {
        weir::stream::parallelism::set_parallelism(partitions as usize);
    }
    limit_malloc_arenas(weir::stream::parallelism::most_partitions());
    // The benchmark's table goes to stdout; routine engine logs would break it up.
    let default_log_level = match command {
        Command::Serve(_) => "info",
        Command::Bench(_) => "warn",
    };
    // Colour codes only for a terminal (NO_COLOR honoured): a log file or a
    // supervisor's pipe gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    tracing_subscriber::fmt()
        .with_ansi(colour)
        .with_env_filter(
            EnvFilter::try_from_env("WEIR_LOG")
                .unwrap_or_else(|_| EnvFilter::new(default_log_level)),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Statements are parsed and planned on the runtime's threads
        // (server::off_the_workers), recursing as deep as a statement nests
        // (up to sql::limits::MAX_NESTING_DEPTH); tokio's 2 MiB overflowed
        // near that depth in a debug build and aborted the process.
        .thread_stack_size(STATEMENT_STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("weir: cannot start the runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(run(command));
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

/// The stack of each runtime thread: a main thread's default.
const STATEMENT_STACK_BYTES: usize = 8 * 1024 * 1024;

async fn run(command: Command) -> weir::error::Result<()> {
    match command {
        Command::Serve(options) => serve(options).await,
        Command::Bench(options) => bench(options).await,
    }
}

async fn bench(options: BenchOptions) -> weir::error::Result<()> {
    if let ScenarioChoice::Sources = options.scenario {
        let temporary = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
        let root = options.data_dir.clone().unwrap_or(temporary.clone());
        let kafka = options.kafka.as_deref();
        let outcome = weir::bench::sources::run(options.rows, &root, kafka).await;
        let _ = std::fs::remove_dir_all(&temporary);
        return outcome;
    }
    let workload = Workload {
        rows: options.rows,
        batch_rows: options.batch_rows,
        scenarios: options.scenario.scenarios(),
        checkpoint_interval: (options.checkpoint_interval_ms > 0)
            .then(|| std::time::Duration::from_millis(options.checkpoint_interval_ms)),
        data_directory: options.data_dir,
        emit_on_update: options.emit == EmitChoice::Update,
    };
    weir::bench::run(&workload).await.map(|_| ())
}

async fn serve(options: ServeOptions) -> weir::error::Result<()> {
    let cache_bytes = options.store_cache_mb.saturating_mul(1024 * 1024);
    let engine = Engine::open_with_cache(&options.data_dir, cache_bytes).await?;
    engine.set_memory_limit_bytes(options.memory_limit);
    engine.set_operator_cache_bytes(options.operator_cache_size);
    engine.connections().set_limits(
        options.max_connections,
        options.superuser_reserved_connections,
    );
    weir::server::limit_statement_messages(options.max_message_size);
    // Started even at 0, so ALTER SYSTEM can turn checkpoints on.
    engine.start_checkpoints(std::time::Duration::from_millis(
        options.checkpoint_interval_ms,
    ));
    engine.start_clock();
    engine.start_sinks();
    engine.start_sources();
    if let Some(listen) = &options.metrics_listen {
        serve_metrics(&engine, listen).await?;
    }
    if let Some(password) = &options.superuser_password {
        engine.roles().set_superuser_password(password)?;
    }
    let security = security(&options)?;
    let listener = server::bind(&options.listen).await?;
    server::check_exposure(&listener, &security, &engine)?;
    let address = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(options.listen.clone());
    // Its own target, so a supervisor (the tests) can ask for this line
    // alone (`WEIR_LOG=warn,weir::ready=info`) and read the port bound
    // for `--listen 127.0.0.1:0` from it.
    tracing::info!(
        target: "weir::ready",
        listen = %address,
        data_dir = %options.data_dir.display(),
        "weir is ready; connect with: psql -h {} -p {} -U weir",
        address.rsplit_once(':').map_or("127.0.0.1", |(host, _)| host),
        address.rsplit_once(':').map_or("5455", |(_, port)| port),
    );
    server::serve(engine, listener, security, shutdown_signal()).await
}

fn security(options: &ServeOptions) -> weir::error::Result<server::Security> {
    let tls = match (&options.tls_cert, &options.tls_key) {
        (Some(certificate), Some(key)) => Some(server::tls_acceptor(certificate, key)?),
        _ => None,
    };
    Ok(server::Security {
        trust_loopback: options.trust_loopback,
        trust_everyone: options.insecure_trust_all,
        require_tls: options.require_tls,
        tls,
        authentication_timeout: std::time::Duration::from_millis(options.authentication_timeout_ms),
    })
}

/// Starts the metrics endpoint; its address goes in a line of its own
/// under `weir::ready`, before the ready line.
async fn serve_metrics(engine: &std::sync::Arc<Engine>, listen: &str) -> weir::error::Result<()> {
    let listener = weir::metrics::bind(listen).await?;
    let address = listener.local_addr();
    if address.as_ref().is_ok_and(|a| !a.ip().is_loopback()) {
        tracing::warn!("metrics are served without authentication on {listen}");
    }
    let address = address.map_or(listen.to_string(), |a| a.to_string());
    tracing::info!(target: "weir::ready", "metrics at http://{address}/metrics");
    tokio::spawn(weir::metrics::serve(engine.clone(), listener));
    Ok(())
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
