//! The E2B API's sandbox records (e2b_sandbox_put), through the public
//! `Queue` API: a write lands only over the version its writer read.

use runbox_common::{Queue, SandboxRecord};

use crate::util::{Redis, ScriptRedis, TTL};

async fn read(queue: &Queue, id: &str) -> Option<SandboxRecord> {
    queue.e2b_sandbox(id).await.expect("redis")
}

#[tokio::test]
async fn a_write_lands_only_over_the_version_it_read() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    assert!(queue.put_e2b_sandbox("sb", "alice", "{\"n\":1}", 0, TTL).await.expect("redis"));
    assert_eq!(read(&queue, "sb").await, Some(SandboxRecord { json: "{\"n\":1}".into(), version: 1 }));
    // A second new sandbox under the same id is refused.
    assert!(!queue.put_e2b_sandbox("sb", "alice", "{\"n\":0}", 0, TTL).await.expect("redis"));

    // Two writers read version 1: the first lands, the second must read again.
    assert!(queue.put_e2b_sandbox("sb", "alice", "{\"n\":2}", 1, TTL).await.expect("redis"));
    assert!(!queue.put_e2b_sandbox("sb", "alice", "{\"n\":3}", 1, TTL).await.expect("redis"));
    assert_eq!(read(&queue, "sb").await, Some(SandboxRecord { json: "{\"n\":2}".into(), version: 2 }));

    // The owner's list holds it until it is deleted; a write after that is refused.
    assert_eq!(queue.owner_e2b_sandboxes("alice").await.expect("redis"), ["sb"]);
    assert!(queue.owner_e2b_sandboxes("bob").await.expect("redis").is_empty());
    assert!(queue.delete_e2b_sandbox("sb", "alice").await.expect("redis"));
    assert!(!queue.put_e2b_sandbox("sb", "alice", "{\"n\":4}", 2, TTL).await.expect("redis"));
    assert_eq!(read(&queue, "sb").await, None);
    assert!(queue.owner_e2b_sandboxes("alice").await.expect("redis").is_empty());
}
