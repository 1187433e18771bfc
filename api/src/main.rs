use std::process::ExitCode;

use anyhow::Context;
use runbox_api::ApiConfig;

fn main() -> ExitCode {
    let stderr = runbox_process::init_tracing();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!, which panics on a closed stderr and blocks on a full one.
            stderr.line(format_args!("runbox-api: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let config = ApiConfig::from_env()?;
    // `runbox-api health`: the image's health check, against the api it runs.
    if std::env::args().nth(1).as_deref() == Some("health") {
        return runbox_process::check_health(config.port, "/readyz").map_err(anyhow::Error::msg);
    }
    let runtime = tokio::runtime::Runtime::new().context("starting tokio")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", config.port))
            .await
            .with_context(|| format!("binding port {}", config.port))?;
        runbox_api::run(config, listener, runbox_process::shutdown_signal()).await.context("serving")
    })
}
