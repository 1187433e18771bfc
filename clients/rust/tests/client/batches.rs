//! Batches: jobs and test cases, results streamed as they finish, cancel.

use std::collections::BTreeMap;

use futures_util::TryStreamExt;
use runbox_client::{BatchQuery, BatchResult, BatchStatus, Case, NewBatch, NewJob, Status};

use crate::util::*;

#[tokio::test]
async fn a_batch_streams_its_results_as_its_jobs_finish() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let jobs = (0..4).map(|i| NewJob::python(format!("print({i} * {i})")).spec);
    let submitted = runbox.submit_batch(&NewBatch::jobs(jobs).shared_runtime(true), None).await.expect("submit");
    assert_eq!(submitted.job_ids.len(), 4);

    let results: Vec<BatchResult> =
        runbox.batch_results(&submitted.id).await.expect("results").try_collect().await.expect("every line");
    let streamed: BTreeMap<String, String> = results
        .into_iter()
        .map(|result| match result {
            BatchResult::Job(job) => (job.id.clone(), job.stdout.clone().unwrap_or_default()),
            BatchResult::Expired { id } => panic!("{id} expired"),
        })
        .collect();
    let expected: BTreeMap<String, String> =
        submitted.job_ids.iter().enumerate().map(|(i, id)| (id.clone(), format!("{}\n", i * i))).collect();
    assert_eq!(streamed, expected);

    let batch = runbox.wait_batch(&submitted.id).await.expect("wait");
    assert_eq!((batch.status, batch.size, batch.done), (BatchStatus::Finished, 4, 4));
    assert_eq!(batch.counts, BTreeMap::from([("completed".to_owned(), 4)]));
    assert_eq!(batch.jobs.iter().map(|job| job.id.clone()).collect::<Vec<_>>(), submitted.job_ids);
    let page = runbox.get_batch(&submitted.id, &BatchQuery { offset: Some(3), ..BatchQuery::default() }).await;
    let page = page.expect("a page");
    assert_eq!((page.jobs.len(), page.next_offset), (1, None));
}

#[tokio::test]
async fn test_cases_get_verdicts_and_a_batch_can_be_cancelled() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let program = NewJob::python("print(int(input()) * 2)").spec;
    let cases = NewBatch::cases(program, [Case::new("1\n", "2\n"), Case::new("2\n", "5\n")]);
    let submitted = runbox.submit_batch(&cases, None).await.expect("submit");
    let batch = runbox.wait_batch(&submitted.id).await.expect("wait");
    let verdicts = BTreeMap::from([("accepted".to_owned(), 1), ("wrong_answer".to_owned(), 1)]);
    assert_eq!(batch.verdicts, verdicts, "{batch:?}");

    let sleepers = (0..3).map(|_| NewJob::python("import time\ntime.sleep(30)").timeout_ms(9000).spec);
    let submitted = runbox.submit_batch(&NewBatch::jobs(sleepers), None).await.expect("submit");
    runbox.cancel_batch(&submitted.id).await.expect("cancel");
    let batch = runbox.wait_batch(&submitted.id).await.expect("wait");
    assert_eq!(batch.counts.get(Status::Cancelled.as_str()), Some(&3), "{batch:?}");
}
