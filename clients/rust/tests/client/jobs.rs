//! Jobs: a round trip, a failing program, a timeout, long-polls, live
//! output and cancel.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use runbox_client::{Event, NewJob, Status, SubmitOptions, Submitted, Verdict};

use crate::util::*;

#[tokio::test]
async fn a_job_runs_and_comes_back_typed() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let job = NewJob::python("import sys\nprint(sys.argv[1:], input()[::-1])")
        .stdin("olleh\n")
        .args(["a", "b"])
        .expected_stdout("['a', 'b'] hello\n");
    let done = runbox.run(&job).await.expect("run");
    assert_eq!((done.status, done.exit_code, done.verdict), (Status::Completed, Some(0), Some(Verdict::Accepted)));
    assert_eq!(done.stdout.as_deref(), Some("['a', 'b'] hello\n"));
    assert!(done.ok() && done.finished_at.is_some() && done.timings.run_ms.is_some(), "{done:?}");
    // The same job read back is the same object.
    assert_eq!(runbox.get(&done.id, None).await.expect("get"), done);
}

#[tokio::test]
async fn a_failing_program_and_a_timeout_are_results_not_errors() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let failing = NewJob::javascript("console.error('oops'); Deno.exit(3)");
    let job = runbox.run(&failing).await.expect("a failing program is a result");
    assert_eq!((job.status, job.exit_code, job.stderr.as_deref()), (Status::Completed, Some(3), Some("oops\n")));
    assert!(!job.ok());

    let looping = NewJob::python("while True:\n    pass").timeout_ms(500).expected_stdout("");
    let job = runbox.run(&looping).await.expect("a timeout is a result");
    assert_eq!((job.status, job.exit_code, job.verdict), (Status::Timeout, None, Some(Verdict::Timeout)));
}

#[tokio::test]
async fn get_long_polls_until_the_job_ends() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let slow = NewJob::python("import time\ntime.sleep(1.5)\nprint('done')");
    let submitted = runbox.submit(&slow, &SubmitOptions::new()).await.expect("submit");
    let Submitted::Pending { id, status: Status::Queued } = submitted else {
        panic!("a submit without wait answers at once: {submitted:?}")
    };
    let now = runbox.get(&id, None).await.expect("get");
    assert!(!now.is_final(), "{now:?}");
    // One long-poll holds until the end: no polling loop.
    let started = Instant::now();
    let job = runbox.get(&id, Some(30)).await.expect("long-poll");
    assert_eq!((job.status, job.stdout.as_deref()), (Status::Completed, Some("done\n")));
    assert!(started.elapsed() < Duration::from_secs(25), "the long-poll held past the end: {:?}", started.elapsed());
    // A finished job answers a submit with `wait` as the job itself.
    let quick = runbox.submit(&NewJob::python("print(1)"), &SubmitOptions::new().wait(30)).await.expect("submit");
    assert!(matches!(&quick, Submitted::Finished(job) if job.stdout.as_deref() == Some("1\n")), "{quick:?}");
}

#[tokio::test]
async fn events_stream_the_output_as_it_is_written_then_the_result() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let code = "import sys, time\nprint('first', flush=True)\nprint('warn', file=sys.stderr, flush=True)\n\
                time.sleep(1.5)\nprint('second')";
    let submitted = runbox.submit(&NewJob::python(code), &SubmitOptions::new()).await.expect("submit");
    let mut events = runbox.events(submitted.id()).await.expect("events");
    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(60), events.next()).await.expect("in time") {
        seen.push((event.expect("an event"), Instant::now()));
    }
    let Some((Event::Result(job), ended)) = seen.last() else { panic!("no result last: {seen:?}") };
    assert_eq!(job.status, Status::Completed);
    // Every chunk came before the result, and put together they are the job's output.
    let (mut stdout, mut stderr, mut first_at) = (String::new(), String::new(), None);
    for (event, at) in &seen[..seen.len() - 1] {
        match event {
            Event::Stdout { offset, data } => {
                assert_eq!(*offset, stdout.len() as u64, "offsets follow on");
                first_at.get_or_insert(*at);
                stdout.push_str(data);
            }
            Event::Stderr { offset, data } => {
                assert_eq!(*offset, stderr.len() as u64, "offsets follow on");
                stderr.push_str(data);
            }
            other => panic!("only chunks before the result: {other:?}"),
        }
    }
    assert_eq!((Some(stdout.as_str()), Some(stderr.as_str())), (job.stdout.as_deref(), job.stderr.as_deref()));
    assert_eq!(stdout, "first\nsecond\n");
    // The first line came while the program slept, not with the result.
    let first_at = first_at.expect("a stdout chunk");
    assert!(ended.duration_since(first_at) >= Duration::from_millis(1000), "streamed only at the end");
}

#[tokio::test]
async fn cancel_kills_a_running_job() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let sleeper = NewJob::javascript("await new Promise((r) => setTimeout(r, 8000))").timeout_ms(9000);
    let id = runbox.submit(&sleeper, &SubmitOptions::new()).await.expect("submit").id().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while runbox.get(&id, None).await.expect("get").status != Status::Running {
        assert!(Instant::now() < deadline, "the job never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = Instant::now();
    runbox.cancel(&id).await.expect("cancel");
    let job = runbox.wait(&id).await.expect("wait");
    assert_eq!((job.status, job.exit_code), (Status::Cancelled, None));
    assert!(started.elapsed() < Duration::from_secs(6), "it ran on: {:?}", started.elapsed());
}
