//! A session's bodies: `POST /v1/sessions` and an exec in one.

use std::time::Duration;

use runbox_common::{JobSpec, Language};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{FieldError, FileRequest, Program, ReturnFilesRequest, whole_number};
use crate::config::{ApiLimits, SessionLimits};

/// The body of `POST /v1/sessions`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    /// Required unless `from_checkpoint` is given, and then it must match
    /// the checkpoint's.
    #[schema(value_type = Option<SessionLanguage>)]
    pub language: Option<Language>,
    /// Seconds without an exec before the session expires.
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 1)]
    pub idle_timeout_s: Option<u64>,
    /// Start from this checkpoint of one of the caller's sessions.
    pub from_checkpoint: Option<String>,
}

/// The languages a session runs (TypeScript runs as jobs only): the full
/// names or their aliases.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum SessionLanguage {
    Python,
    Javascript,
    Py,
    Js,
}

impl SessionRequest {
    /// The session's idle timeout within `limits`, and the language it
    /// asked for, which a session can run. Whether it matches the
    /// checkpoint's is for the caller, who reads the checkpoint.
    pub fn validate(&self, limits: &SessionLimits) -> Result<(Option<Language>, Duration), FieldError> {
        if self.language == Some(Language::Typescript) {
            return Err(FieldError::invalid(
                "language",
                "sessions run python or javascript: a TypeScript exec would need its types stripped inside the \
                 sandbox, which runbox does not do; run TypeScript as jobs",
            ));
        }
        let max = limits.max_idle.as_secs();
        let idle = match self.idle_timeout_s {
            None => limits.default_idle,
            Some(s) if (1..=max).contains(&s) => Duration::from_secs(s),
            Some(_) => {
                let message = format!("idle_timeout_s must be a whole number of seconds from 1 to {max}");
                return Err(FieldError::invalid("idle_timeout_s", message));
            }
        };
        Ok((self.language, idle))
    }
}

/// The body of `POST /v1/sessions/{id}/exec`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    #[schema(required = true, value_type = String, min_length = 1, pattern = r"\S")]
    pub code: Option<String>,
    /// Python sessions only.
    pub stdin: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 1)]
    pub timeout_ms: Option<u64>,
    /// Files written under the session's home before the code runs, as a
    /// job's `files`; they stay in the session.
    pub files: Option<Vec<FileRequest>>,
    /// Python sessions only: `true` for every file under the home this exec
    /// created or changed, or up to 64 paths under the home; the job's
    /// `files` has them, as a job's does.
    pub return_files: Option<ReturnFilesRequest>,
}

impl ExecRequest {
    /// The step this exec is in a session of `language`, checked as a job's
    /// program is.
    pub fn validate(self, language: Language, limits: &ApiLimits) -> Result<JobSpec, FieldError> {
        if language == Language::Javascript && self.stdin.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(FieldError::invalid(
                "stdin",
                "stdin is not available in a JavaScript session: pass data in the code, or use a job",
            ));
        }
        if language == Language::Javascript && self.return_files.is_some() {
            return Err(FieldError::invalid(
                "return_files",
                "return_files is for Python sessions, as for jobs: read a JavaScript session's files with the files \
                 API",
            ));
        }
        let program = Program {
            language: Some(language),
            code: self.code,
            stdin: self.stdin,
            timeout_ms: self.timeout_ms,
            files: self.files,
            return_files: self.return_files,
            ..Program::default()
        };
        program.validate(limits)
    }
}
