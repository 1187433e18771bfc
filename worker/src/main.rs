use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use runbox_common::{JobSpec, Language};
use runbox_worker::sandbox::Runner;
use runbox_worker::{SandboxConfig, WorkerConfig};
use tokio_util::sync::CancellationToken;

mod batch;

/// With no subcommand, serves the queue: claims jobs from Redis and runs
/// them until SIGTERM or Ctrl-C. Settings come from the RUNBOX_* variables.
#[derive(Parser)]
#[command(name = "runbox-worker", about = "Runs untrusted code in single-use, deny-all Deno children.")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one file through the sandbox, exactly as a job would run, and
    /// prints the outcome as JSON. Needs no Redis.
    Exec {
        /// python, javascript or typescript (or py, js, ts).
        #[arg(long, short)]
        language: Language,
        /// The program; `-` reads it from stdin.
        file: PathBuf,
        /// Text fed to the program's stdin.
        #[arg(long, default_value = "")]
        stdin: String,
        /// Wall-clock limit in milliseconds.
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
    /// Runs many jobs through the warm pool, without Redis: reads one job per
    /// line of stdin (JSON: language, code, stdin?, timeout_ms?, id?) and
    /// writes one result per line as each finishes (JSON: index, id, status,
    /// exit_code, stdout, stderr, duration_ms, boot_ms, latency_ms).
    Batch {
        /// Jobs run at once.
        #[arg(long, default_value_t = 2)]
        concurrency: usize,
        /// Wait for a warm child of each language in the batch before the
        /// first job, so timings show the steady state.
        #[arg(long)]
        warm_up: bool,
        /// Pause before each job, in milliseconds (an agent's think time).
        #[arg(long, default_value_t = 0)]
        pause_ms: u64,
    },
    /// The image's health check: asks this worker's `/healthz`, on
    /// RUNBOX_METRICS_PORT, and fails if that is unset or does not answer 200.
    Health,
}

fn main() -> ExitCode {
    let stderr = runbox_process::init_tracing();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!, which panics on a closed stderr and blocks on a full one.
            stderr.line(format_args!("runbox-worker: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().context("starting tokio")?;
    match cli.command {
        None => {
            let config = WorkerConfig::from_env()?;
            runtime.block_on(async { runbox_worker::run(config, runbox_process::shutdown_signal()).await })?;
        }
        Some(Command::Exec { language, file, stdin, timeout_ms }) => runtime.block_on(async {
            let code = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading the program from stdin")?
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?
            };
            let sandbox = runbox_worker::sandbox(&SandboxConfig::from_env()?).await?;
            let runner = Runner::cold(Arc::new(sandbox));
            let report = runner
                .run(&JobSpec { stdin, timeout_ms, ..JobSpec::new(language, code) }, &CancellationToken::new())
                .await;
            println!("{}", serde_json::to_string_pretty(&report.outcome)?);
            anyhow::Ok(())
        })?,
        Some(Command::Health) => {
            let port = WorkerConfig::from_env()?
                .metrics_port
                .context("RUNBOX_METRICS_PORT is not set: nothing serves /healthz")?;
            runbox_process::check_health(port, "/healthz").map_err(anyhow::Error::msg)?;
        }
        Some(Command::Batch { concurrency, warm_up, pause_ms }) => {
            let pause = std::time::Duration::from_millis(pause_ms);
            runtime.block_on(batch::run(concurrency.max(1), warm_up, pause))?;
        }
    }
    Ok(())
}
