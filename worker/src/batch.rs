//! `runbox-worker batch`: many jobs through the warm pool, without Redis or
//! HTTP. Used by `scripts/bench` to measure the runner alone, and handy for
//! evaluating a file of programs locally.

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use runbox_common::{JobSpec, Language};
use runbox_worker::SandboxConfig;
use runbox_worker::sandbox::{PoolConfig, Runner};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    id: Option<String>,
    #[serde(flatten)]
    spec: JobSpec,
}

#[derive(Serialize)]
struct Result<'a> {
    index: usize,
    id: Option<&'a str>,
    #[serde(flatten)]
    outcome: &'a runbox_common::Outcome,
    boot_ms: u64,
    /// From handing the job to the runner until its outcome: boot (if cold)
    /// plus run plus reaping.
    latency_ms: f64,
}

pub async fn run(concurrency: usize, warm_up: bool, pause: Duration) -> anyhow::Result<()> {
    let mut jobs = Vec::new();
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.context("reading stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let job: Line = serde_json::from_str(&line).with_context(|| format!("line {}: not a job", n + 1))?;
        jobs.push(job);
    }
    let config = SandboxConfig::from_env()?;
    let sandbox = Arc::new(runbox_worker::sandbox(&config).await?);
    let pool = PoolConfig::from_env(concurrency)?;
    let runner = Arc::new(Runner::pooled(sandbox, pool));
    if warm_up {
        for language in Language::ALL {
            if jobs.iter().any(|j| j.spec.language == language) {
                runner.wait_warm(language).await;
            }
        }
    }

    let jobs = Arc::new(jobs);
    let next = Arc::new(Mutex::new(0usize));
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (jobs, next, out, runner) = (jobs.clone(), next.clone(), out.clone(), runner.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let index = {
                    let mut next = next.lock().unwrap_or_else(|p| p.into_inner());
                    let index = *next;
                    *next += 1;
                    index
                };
                let Some(job) = jobs.get(index) else { return anyhow::Ok(()) };
                tokio::time::sleep(pause).await;
                let started = Instant::now();
                let report = runner.run(&job.spec, &CancellationToken::new()).await;
                let result = Result {
                    index,
                    id: job.id.as_deref(),
                    outcome: &report.outcome,
                    boot_ms: u64::try_from(report.boot.as_millis()).unwrap_or(u64::MAX),
                    latency_ms: started.elapsed().as_secs_f64() * 1000.0,
                };
                let line = serde_json::to_string(&result)?;
                let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
                writeln!(out, "{line}")?;
                out.flush()?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}
