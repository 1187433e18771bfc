//! A connection to one Redis server or to a Redis Cluster, behind one type,
//! so the queue's commands and scripts run unchanged on either.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::OnceCell;

/// Where Redis is: `REDIS_URL`, and `RUNBOX_REDIS_CLUSTER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisTarget {
    /// One URL, or for a cluster one or more seed nodes.
    pub urls: Vec<String>,
    pub cluster: bool,
}

/// A lazily connecting, self-healing connection; clones share it.
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    Cluster(Arc<Cluster>),
}

/// Connected on first use; the cluster client follows slot moves and
/// reconnects by itself.
pub struct Cluster {
    client: ClusterClient,
    conn: OnceCell<ClusterConnection>,
}

impl Cluster {
    async fn connection(&self) -> RedisResult<ClusterConnection> {
        // A failed first connection is not kept: the next command tries again.
        self.conn.get_or_try_init(|| self.client.get_async_connection()).await.cloned()
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl Connection {
    /// A connection that waits up to `response_timeout` for each reply.
    /// Nothing is connected yet, so Redis may still be down.
    pub fn new(target: &RedisTarget, response_timeout: Duration) -> RedisResult<Connection> {
        if target.cluster {
            let client = ClusterClientBuilder::new(target.urls.clone())
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(response_timeout)
                .build()?;
            return Ok(Connection::Cluster(Arc::new(Cluster { client, conn: OnceCell::new() })));
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        Ok(Connection::Single(ConnectionManager::new_lazy_with_config(pubsub_client(target)?, config)?))
    }
}

/// The server pub/sub connections go to: the one server, or a cluster's
/// first seed node (a cluster relays every PUBLISH to all its nodes).
pub fn pubsub_client(target: &RedisTarget) -> RedisResult<redis::Client> {
    redis::Client::open(target.urls.first().map_or("", String::as_str))
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(cluster) => {
                Box::pin(async move { cluster.connection().await?.req_packed_command(cmd).await })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(cluster) => {
                Box::pin(async move { cluster.connection().await?.req_packed_commands(pipeline, offset, count).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(conn) => conn.get_db(),
            Connection::Cluster(_) => 0,
        }
    }
}
