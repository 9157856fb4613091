//! What the server's HTTP surfaces share, beneath the API ([`crate::api`]), the
//! daemon routes and the chat webhooks ([`crate::hooks`]): one error type that knows
//! its status and renders the contract's JSON shape, and strictly parsed request bodies
//! and query strings, at most [`BODY_LIMIT`] bytes.

mod body;
mod error;

pub use body::{BODY_LIMIT, JsonBody, QueryArgs};
pub use error::{ApiError, refusal_status};
