//! Idempotent submits, typed errors, and the retry of 429 and 503.

use std::time::{Duration, Instant};

use runbox_client::{Client, Error, NewBatch, NewJob, Status, SubmitOptions};

use crate::util::*;

#[tokio::test]
async fn a_resubmit_with_the_same_idempotency_key_returns_the_first_job() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let options = SubmitOptions::new().idempotency_key("rust-client-retry");
    let first = runbox.submit(&NewJob::python("print(1)"), &options).await.expect("submit");
    // Whatever the body: the key names the job.
    let again = runbox.submit(&NewJob::python("print(2)"), &options).await.expect("resubmit");
    assert_eq!(again.id(), first.id());
    let other = runbox.submit(&NewJob::python("print(1)"), &SubmitOptions::new()).await.expect("submit");
    assert_ne!(other.id(), first.id());
    assert_eq!(runbox.wait(first.id()).await.expect("wait").stdout.as_deref(), Some("1\n"));

    let batch = NewBatch::jobs([NewJob::python("print(3)").spec]);
    let first = runbox.submit_batch(&batch, Some("rust-client-batch")).await.expect("submit");
    let again = runbox.submit_batch(&batch, Some("rust-client-batch")).await.expect("resubmit");
    assert_eq!(again, first);
}

#[tokio::test]
async fn refusals_are_typed_errors_with_the_apis_code() {
    let stack = Stack::start(&[]).await;
    let stranger = Client::new(&stack.api.base, "not-a-token-at-all-0123").expect("a client");
    let error = stranger.run(&NewJob::python("print(1)")).await.expect_err("a wrong token");
    let Error::Api { status, code, message, .. } = &error else { panic!("not an api error: {error:?}") };
    assert_eq!((status.as_u16(), code.as_str()), (401, "unauthorized"));
    assert!(!message.is_empty());

    let runbox = client(&stack.api);
    let missing = runbox.get("00000000-0000-4000-8000-000000000000", None).await.expect_err("no such job");
    assert_eq!((missing.status().map(|s| s.as_u16()), missing.code()), (Some(404), Some("not_found")));
    let bad = NewJob::python("print(1)").timeout_ms(0);
    let refused = runbox.submit(&bad, &SubmitOptions::new()).await.expect_err("a bad field");
    assert_eq!(refused.code(), Some("invalid_field"), "{refused}");
    // A spec sent as JSON is the api's to judge, typos included.
    let typo = serde_json::json!({"language": "python", "code": "print(1)", "timeout": 5});
    let refused = runbox.submit_raw(&typo, &SubmitOptions::new()).await.expect_err("an unknown field");
    assert_eq!(refused.code(), Some("unknown_field"), "{refused}");

    let nowhere = Client::new(&format!("http://127.0.0.1:{}", runbox_tests::free_port()), ALICE).expect("a client");
    let error = nowhere.get("x", None).await.expect_err("nothing listens");
    assert!(matches!(error, Error::Transport { .. }), "{error:?}");
}

#[tokio::test]
async fn a_full_queue_is_retried_after_retry_after() {
    let stack = Stack::start(&[]).await;
    // A second api on the same queue, with room for one job.
    let tight = Api::start(stack.redis(), &[("RUNBOX_MAX_QUEUE", "1")]).await;
    // Room comes once the sleeper has run, Python booted first: more than
    // the default five retries a second apart may take.
    let runbox = Client::builder(&tight.base, ALICE).max_retries(30).build().expect("a client");
    let sleeper = NewJob::python("import time\ntime.sleep(2)");
    runbox.submit(&sleeper, &SubmitOptions::new()).await.expect("the one job");
    let started = Instant::now();
    let job = runbox.run(&NewJob::python("print('got in')")).await.expect("retried until there was room");
    assert_eq!((job.status, job.stdout.as_deref()), (Status::Completed, Some("got in\n")));
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited for room: {:?}", started.elapsed());

    let impatient = Client::builder(&tight.base, ALICE).max_retries(0).build().expect("a client");
    impatient.submit(&sleeper, &SubmitOptions::new()).await.expect("the one job");
    let full = impatient.submit(&NewJob::python("print(1)"), &SubmitOptions::new()).await.expect_err("full");
    assert_eq!((full.status().map(|s| s.as_u16()), full.code()), (Some(503), Some("queue_full")), "{full}");
}
