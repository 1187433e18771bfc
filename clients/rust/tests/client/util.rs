//! What the client tests share: a stack and a client of it.

pub use runbox_tests::{ALICE, Api, Stack};

/// A client of `api` as alice, with the default settings.
pub fn client(api: &Api) -> runbox_client::Client {
    runbox_client::Client::new(&api.base, ALICE).expect("a client")
}
