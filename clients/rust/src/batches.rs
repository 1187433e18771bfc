//! `/v1/batches`: many jobs submitted, read, streamed and cancelled as one.

use crate::client::{Call, Client, MAX_WAIT_S};
use crate::error::Error;
use crate::jobs::CANCEL_HOLD;
use crate::request::{BatchQuery, NewBatch};
use crate::response::{Batch, BatchStatus, BatchSubmitted};
use crate::stream::BatchResults;

impl Client {
    /// Queues every job of `batch`, or none: an invalid job is an
    /// [`Error::Api`] `invalid_batch` whose `jobs` names each one. With an
    /// `idempotency_key` reused, queues nothing and answers with the batch
    /// it first queued.
    pub async fn submit_batch(&self, batch: &NewBatch, idempotency_key: Option<&str>) -> Result<BatchSubmitted, Error> {
        self.json(&Call::post(&["v1", "batches"]).body(batch)?.idempotency_key(idempotency_key)).await
    }

    /// [`Client::submit_batch`] for a batch body as JSON, sent as it is
    /// (see [`Client::submit_raw`]).
    pub async fn submit_batch_raw(
        &self,
        batch: &serde_json::Value,
        idempotency_key: Option<&str>,
    ) -> Result<BatchSubmitted, Error> {
        self.json(&Call::post(&["v1", "batches"]).body(batch)?.idempotency_key(idempotency_key)).await
    }

    /// Batch `id`: its counts and one page of its jobs; with `query.wait`,
    /// once every job is finished or that many seconds have passed.
    pub async fn get_batch(&self, id: &str, query: &BatchQuery) -> Result<Batch, Error> {
        let call = Call::get(&["v1", "batches", id])
            .wait(query.wait)
            .query("offset", query.offset)
            .query("limit", query.limit);
        self.json(&call).await
    }

    /// Batch `id` once every job of it is finished, with its first page.
    pub async fn wait_batch(&self, id: &str) -> Result<Batch, Error> {
        loop {
            let batch = self.get_batch(id, &BatchQuery { wait: Some(MAX_WAIT_S), ..BatchQuery::default() }).await?;
            if batch.status == BatchStatus::Finished {
                return Ok(batch);
            }
        }
    }

    /// Cancels every job of batch `id` not yet finished; answers with the
    /// batch after up to 2 s.
    pub async fn cancel_batch(&self, id: &str) -> Result<Batch, Error> {
        self.json(&Call::delete(&["v1", "batches", id]).hold(CANCEL_HOLD)).await
    }

    /// Each job of batch `id` as it finishes, until all have been sent.
    pub async fn batch_results(&self, id: &str) -> Result<BatchResults, Error> {
        let call = Call::get(&["v1", "batches", id, "results"]).stream("application/x-ndjson");
        let (response, what) = self.send(&call).await?;
        Ok(BatchResults::new(response, what))
    }
}
