//! Each Lua script under `common/src/lua/`, run on a real `redis-server`
//! through the public `Queue` API, one module per topic.

mod keys;
mod queue;
mod sandboxes;
mod session;
mod util;
