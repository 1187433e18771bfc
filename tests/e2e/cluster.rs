//! The queue on a Redis Cluster: three nodes started here, the api and a
//! worker pointed at them with `RUNBOX_REDIS_CLUSTER=true`. Every Lua script
//! touches many keys at once, which a cluster allows only within one slot:
//! the queue's hash tag puts them there.

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::*;

/// Three empty cluster nodes, joined into one cluster with all 16,384
/// slots assigned. Dropping it stops them.
struct Cluster {
    nodes: Vec<Redis>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("cluster dir");
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let (port, bus) = (free_port(), free_port());
            let config = dir.path().join(format!("nodes-{port}.conf"));
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus.to_string(),
                "--cluster-config-file",
                config.to_str().expect("utf-8 path"),
                "--cluster-node-timeout",
                "2000",
            ]
            .map(str::to_owned);
            nodes.push(Redis::start_with(port, &args.each_ref().map(String::as_str)).await);
        }
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let created = tokio::process::Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .await
            .expect("redis-cli (installed with redis-server)");
        assert!(created.status.success(), "cluster create: {}", String::from_utf8_lossy(&created.stdout));
        let cluster = Cluster { nodes, _dir: dir };
        for node in &cluster.nodes {
            for attempt in 0.. {
                let info: String = node.cmd(redis::cmd("CLUSTER").arg("INFO")).await;
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(attempt < 200, "node {} never saw the cluster ok: {info}", node.port);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        cluster
    }

    /// `REDIS_URL` for runbox: every node, as seeds.
    fn url(&self) -> String {
        self.nodes.iter().map(Redis::url).collect::<Vec<_>>().join(",")
    }

    async fn keyslot(&self, key: &str) -> u16 {
        self.nodes[0].cmd(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).await
    }
}

#[tokio::test]
async fn the_queue_works_on_a_redis_cluster() {
    let cluster = Cluster::start().await;
    let url = cluster.url();
    let env = [("REDIS_URL", url.as_str()), ("RUNBOX_REDIS_CLUSTER", "true")];
    // Any node serves as the base Redis the helpers know; REDIS_URL names all three.
    let api = Api::start(&cluster.nodes[0], &env).await;
    let worker_env: Vec<(&str, &str)> = env.iter().copied().chain([("RUNBOX_WORKER_CONCURRENCY", "1")]).collect();
    let worker = start_worker(&cluster.nodes[0], &worker_env).await;

    // A job of each language, with long-poll (pub/sub on a cluster).
    assert_eq!(api.run("js", "console.log(6 * 7)").await["stdout"], "42\n");
    assert_eq!(api.run("python", "print(sum(range(10)))").await["stdout"], "45\n");

    // A batch, its counts and its jobs.
    let jobs: Vec<Value> = (0..5).map(|i| json!({ "language": "js", "code": format!("console.log({i})") })).collect();
    let response = api.http.post(api.url("/v1/batches")).bearer_auth(ALICE).json(&json!({ "jobs": jobs })).send();
    let batch: Value = response.await.expect("batch").json().await.expect("json");
    let id = batch["id"].as_str().expect("batch id");
    let response = api.http.get(api.url(&format!("/v1/batches/{id}?wait=60"))).bearer_auth(ALICE).send().await;
    let batch: Value = response.expect("get batch").json().await.expect("json");
    assert_eq!(batch["counts"]["completed"], 5, "{batch}");

    // A queued job cancelled behind a slow one (one slot), and an
    // idempotent retry answered with the first job.
    let (_, slow) =
        api.submit(json!({ "language": "js", "code": "await new Promise((r) => setTimeout(r, 1500))" }), None).await;
    let (_, queued) = api.submit(json!({ "language": "js", "code": "console.log('never')" }), None).await;
    let queued_id = queued["id"].as_str().expect("id");
    let response = api.http.delete(api.url(&format!("/v1/jobs/{queued_id}"))).bearer_auth(ALICE).send().await;
    let cancelled: Value = response.expect("cancel").json().await.expect("json");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let again = |key: &'static str| {
        let request = api.http.post(api.url("/v1/jobs")).bearer_auth(ALICE).header("Idempotency-Key", key);
        async move {
            let response = request.json(&json!({ "language": "js", "code": "console.log(1)" })).send().await;
            response.expect("submit").json::<Value>().await.expect("json")["id"].clone()
        }
    };
    assert_eq!(again("retry-1").await, again("retry-1").await);
    api.until_status(slow["id"].as_str().expect("id"), "completed", Duration::from_secs(30)).await;

    // Every key those touched shares one slot.
    let keys = keys();
    let slot = cluster.keyslot(&keys.ready_owners()).await;
    for key in [keys.jobs_stream("alice"), keys.job(queued_id), keys.batch(id), keys.callbacks()] {
        assert_eq!(cluster.keyslot(&key).await, slot, "{key}");
    }
    assert!(!worker.logs().contains("ERROR"), "{}", worker.logs());
}
