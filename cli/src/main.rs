//! `runbox`, the command line for a runbox service.
//!
//! `runbox run FILE` prints the program's stdout and stderr as they were and
//! exits with the program's exit code, or with one of the codes below when
//! it did not run to its end. `runbox batch FILE.jsonl` judges many jobs as
//! batches and prints each result as a JSON line. `runbox files` moves
//! files in and out of a session's home.
//!
//! Every call goes through `runbox_client`, which retries 429 and 503 and
//! turns the API's errors into ones that name its code.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Parser, Subcommand};
use futures_util::StreamExt;
use runbox_client::{BatchResult, Client, Event, FileType, Job, Status, SubmitOptions};
use serde_json::{Value, json};

// `runbox run`'s exit codes when the program did not end by itself.
/// The time limit killed it (the code GNU `timeout` uses).
const EXIT_TIMEOUT: u8 = 124;
/// It hit the memory cap.
const EXIT_MEMORY: u8 = 125;
/// It did not run to an end for another reason: cancelled, rejected, its
/// workers lost, or runbox failed.
const EXIT_NOT_RUN: u8 = 126;
/// Every command's exit code when runbox refused the request or could not
/// be reached (`EX_UNAVAILABLE`).
const EXIT_UNAVAILABLE: u8 = 69;

#[derive(Parser)]
#[command(name = "runbox", version, about = "Run code in a runbox service's sandbox")]
struct Cli {
    /// The service's URL.
    #[arg(long, env = "RUNBOX_URL", default_value = "http://127.0.0.1:8080", global = true)]
    url: String,
    /// An API token.
    #[arg(long, env = "RUNBOX_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs FILE and waits: its stdout and stderr as they were, its exit
    /// code (124 timeout, 125 memory, 126 did not run, 69 runbox error).
    Run(Program),
    /// Queues FILE and prints the job's id.
    Submit(Program),
    /// Prints a job as JSON.
    Get {
        id: String,
        /// Wait until it is finished.
        #[arg(long)]
        wait: bool,
    },
    /// Cancels a job and prints it as JSON.
    Cancel { id: String },
    /// Runs every job of a JSONL file (one job spec per line) as batches,
    /// printing each finished job as a JSON line with its line's `index`,
    /// then a summary by status and verdict on stderr.
    Batch {
        file: PathBuf,
        /// Run every job in the token's long-lived children, JavaScript too
        /// (by default only Python and TypeScript jobs are).
        #[arg(long, conflicts_with = "no_shared_runtime")]
        shared_runtime: bool,
        /// Run every job in a fresh child of its own, Python too.
        #[arg(long)]
        no_shared_runtime: bool,
    },
    /// A session's files: its home, the working directory its code runs in.
    #[command(subcommand)]
    Files(FilesCommand),
}

#[derive(Subcommand)]
enum FilesCommand {
    /// Uploads LOCAL (`-`: stdin) to the session at REMOTE, by default
    /// LOCAL's file name; its directories are made, a file there replaced.
    Put {
        session: String,
        local: PathBuf,
        /// A path relative to the session's home.
        remote: Option<String>,
    },
    /// Downloads REMOTE to LOCAL, by default REMOTE's file name in the
    /// current directory; `-` writes it to stdout.
    Get { session: String, remote: String, local: Option<PathBuf> },
    /// Lists DIR (the session's home by default): type, size, modified
    /// time and path of each entry.
    Ls { session: String, dir: Option<String> },
    /// Deletes REMOTE, or the directory with all it holds.
    Rm { session: String, remote: String },
}

#[derive(Args)]
struct Program {
    /// The program; `-` reads it from stdin.
    file: PathBuf,
    /// python, javascript or typescript; by default from FILE's extension.
    #[arg(long, short)]
    language: Option<String>,
    /// A file whose contents are the program's stdin.
    #[arg(long, value_name = "FILE")]
    stdin: Option<PathBuf>,
    /// Wall-clock limit in milliseconds.
    #[arg(long, value_name = "MS")]
    timeout: Option<u64>,
    /// Arguments for the program, after `--`.
    #[arg(last = true)]
    args: Vec<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("runbox: {e:#}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let token = cli.token.ok_or_else(|| anyhow!("a token is needed: --token or RUNBOX_TOKEN"))?;
    let client = Client::new(&cli.url, &token)?;
    match cli.command {
        Command::Run(program) => {
            let submitted = client.submit_raw(&program.spec()?, &SubmitOptions::new()).await?;
            let job = print_as_it_runs(&client, submitted.id()).await?;
            Ok(ExitCode::from(exit_code(&job)))
        }
        Command::Submit(program) => {
            let submitted = client.submit_raw(&program.spec()?, &SubmitOptions::new()).await?;
            println!("{}", submitted.id());
            Ok(ExitCode::SUCCESS)
        }
        Command::Get { id, wait } => {
            let job = if wait { client.wait(&id).await? } else { client.get(&id, None).await? };
            print_job(&job)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Cancel { id } => {
            print_job(&client.cancel(&id).await?)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Batch { file, shared_runtime, no_shared_runtime } => {
            // Neither flag: the api's default for each job's language.
            let shared = (shared_runtime || no_shared_runtime).then_some(shared_runtime);
            batch(&client, &file, shared).await
        }
        Command::Files(command) => {
            files(&client, command).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn files(client: &Client, command: FilesCommand) -> anyhow::Result<()> {
    match command {
        FilesCommand::Put { session, local, remote } => {
            let stdin = local == Path::new("-");
            let remote = match remote {
                Some(remote) => remote,
                None if stdin => bail!("name the file to write: runbox files put SESSION - REMOTE"),
                None => file_name(&local)?,
            };
            let bytes = if stdin {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).context("reading stdin")?;
                bytes
            } else {
                std::fs::read(&local).with_context(|| format!("reading {}", local.display()))?
            };
            let written = client.upload_file(&session, &remote, bytes).await?;
            println!("{} bytes to {}", written.size, written.path);
        }
        FilesCommand::Get { session, remote, local } => {
            let bytes = client.read_file(&session, &remote).await?;
            let local = match local {
                Some(local) => local,
                None => PathBuf::from(file_name(Path::new(&remote))?),
            };
            if local == Path::new("-") {
                let mut stdout = std::io::stdout();
                stdout.write_all(&bytes)?;
                stdout.flush()?;
            } else {
                std::fs::write(&local, &bytes).with_context(|| format!("writing {}", local.display()))?;
            }
        }
        FilesCommand::Ls { session, dir } => {
            let listing = client.list_files(&session, dir.as_deref()).await?;
            let mut stdout = std::io::stdout().lock();
            for entry in &listing.files {
                let (kind, slash) = match entry.file_type {
                    FileType::File => ("file", ""),
                    FileType::Directory => ("directory", "/"),
                    FileType::Link => ("link", ""),
                };
                writeln!(stdout, "{kind:<9} {:>10}  {}  {}{slash}", entry.size, entry.modified, entry.path)?;
            }
            stdout.flush()?;
            if listing.truncated {
                eprintln!("runbox: the directory holds more entries than runbox lists; these are the first");
            }
        }
        FilesCommand::Rm { session, remote } => client.delete_file(&session, &remote).await?,
    }
    Ok(())
}

/// The last name of `path`, as a file's name in the other place.
fn file_name(path: &Path) -> anyhow::Result<String> {
    path.file_name()
        .and_then(|name| name.to_str())
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("{} names no file: give the other path too", path.display()))
}

/// Prints a job as pretty JSON, its fields in name order.
fn print_job(job: &Job) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(&serde_json::to_value(job)?)?);
    Ok(())
}

impl Program {
    /// The job spec as JSON, sent as it is: the api judges it (a language
    /// it does not know is its `invalid_field`, named on stderr).
    fn spec(&self) -> anyhow::Result<Value> {
        let code = if self.file == Path::new("-") {
            std::io::read_to_string(std::io::stdin()).context("reading the program from stdin")?
        } else {
            std::fs::read_to_string(&self.file).with_context(|| format!("reading {}", self.file.display()))?
        };
        let language = match &self.language {
            Some(language) => language.clone(),
            None => language_of(&self.file)?.to_owned(),
        };
        let mut spec = json!({ "language": language, "code": code });
        if let Some(path) = &self.stdin {
            spec["stdin"] =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?.into();
        }
        if let Some(ms) = self.timeout {
            spec["timeout_ms"] = ms.into();
        }
        if !self.args.is_empty() {
            spec["args"] = self.args.clone().into();
        }
        Ok(spec)
    }
}

fn language_of(file: &Path) -> anyhow::Result<&'static str> {
    match file.extension().and_then(|e| e.to_str()) {
        Some("py") => Ok("python"),
        Some("js" | "mjs" | "cjs") => Ok("javascript"),
        Some("ts" | "mts") => Ok("typescript"),
        _ => bail!("cannot tell the language of {}: pass --language", file.display()),
    }
}

/// Prints job `id`'s stdout and stderr as the program writes them and
/// returns the finished job. Without a live stream (a server that has
/// none, or one that broke off), whatever was not printed yet is printed
/// from the finished job.
async fn print_as_it_runs(client: &Client, id: &str) -> anyhow::Result<Job> {
    let mut printed = [0usize, 0usize];
    if let Ok(mut events) = client.events(id).await {
        while let Some(Ok(event)) = events.next().await {
            match event {
                Event::Stdout { data, .. } => printed[0] += write_stream(0, &data)?,
                Event::Stderr { data, .. } => printed[1] += write_stream(1, &data)?,
                Event::Restart => {
                    printed = [0, 0];
                    eprintln!("runbox: the job is running again from the start (its worker stopped)");
                }
                Event::Result(job) => {
                    print_rest(&job, printed)?;
                    return Ok(*job);
                }
            }
        }
    }
    let job = client.wait(id).await?;
    print_rest(&job, printed)?;
    Ok(job)
}

/// Prints what of `job`'s output is past the `printed` bytes of each stream.
fn print_rest(job: &Job, printed: [usize; 2]) -> anyhow::Result<()> {
    for (side, text) in [&job.stdout, &job.stderr].into_iter().enumerate() {
        let text = text.as_deref().unwrap_or_default();
        write_stream(side, text.get(printed[side]..).unwrap_or_default())?;
    }
    Ok(())
}

/// Writes `text` to stdout (side 0) or stderr (1); answers its length.
fn write_stream(side: usize, text: &str) -> anyhow::Result<usize> {
    if side == 0 {
        let mut stdout = std::io::stdout();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
    } else {
        std::io::stderr().write_all(text.as_bytes())?;
    }
    Ok(text.len())
}

/// The program's own exit code, or what says why there is none.
fn exit_code(job: &Job) -> u8 {
    match job.status {
        Status::Completed => {
            job.exit_code.and_then(|code| u64::try_from(code).ok()).map_or(EXIT_NOT_RUN, |code| (code & 0xff) as u8)
        }
        Status::Timeout => EXIT_TIMEOUT,
        Status::MemoryExceeded => EXIT_MEMORY,
        _ => EXIT_NOT_RUN,
    }
}

async fn batch(client: &Client, file: &Path, shared_runtime: Option<bool>) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut jobs = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let spec: Value = serde_json::from_str(line).with_context(|| format!("{}:{}", file.display(), number + 1))?;
        if !spec.is_object() {
            bail!("{}:{}: a job spec is a JSON object", file.display(), number + 1);
        }
        jobs.push(spec);
    }
    let per_batch = client.runtimes().await?.limits.max_batch.max(1);

    let progress = indicatif::ProgressBar::new(jobs.len() as u64);
    progress.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} jobs, {elapsed} ({eta} left)")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    let mut verdicts: BTreeMap<String, u64> = BTreeMap::new();
    let mut stdout = std::io::stdout().lock();
    for (chunk_number, chunk) in jobs.chunks(per_batch).enumerate() {
        // Each line is sent as it was written, for the api to judge.
        let mut body = json!({ "jobs": chunk });
        if let Some(shared) = shared_runtime {
            body["shared_runtime"] = json!(shared);
        }
        let submitted = client.submit_batch_raw(&body, None).await?;
        let index_of: BTreeMap<&str, usize> =
            submitted.job_ids.iter().enumerate().map(|(i, id)| (id.as_str(), chunk_number * per_batch + i)).collect();
        let mut results = client.batch_results(&submitted.id).await?;
        while let Some(result) = results.next().await {
            let (mut line, status) = match result? {
                BatchResult::Job(job) => {
                    if let Some(verdict) = job.verdict {
                        *verdicts.entry(verdict.as_str().to_owned()).or_default() += 1;
                    }
                    (serde_json::to_value(&job)?, job.status.as_str())
                }
                BatchResult::Expired { id } => (json!({ "id": id, "status": null, "expired": true }), "expired"),
            };
            *statuses.entry(status.to_owned()).or_default() += 1;
            if let Some(index) = line["id"].as_str().and_then(|id| index_of.get(id)) {
                line["index"] = (*index).into();
            }
            writeln!(stdout, "{line}")?;
            progress.inc(1);
        }
    }
    stdout.flush()?;
    progress.finish_and_clear();
    let list = |counts: &BTreeMap<String, u64>| {
        counts.iter().map(|(name, n)| format!("{name} {n}")).collect::<Vec<_>>().join(", ")
    };
    eprintln!("{} jobs: {}", jobs.len(), list(&statuses));
    if !verdicts.is_empty() {
        eprintln!("verdicts: {}", list(&verdicts));
    }
    Ok(ExitCode::SUCCESS)
}
