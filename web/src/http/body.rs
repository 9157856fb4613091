//! Request bodies and query strings: parsed strictly, errors in the contract's shape.

use super::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// The largest request body accepted; larger ones answer 413.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// A JSON request body. Unlike `axum::Json` it does not insist on a content type (the
/// CLI sends bodies over a socket only the user can open), and every failure is an
/// [`ApiError`]: 413 past [`BODY_LIMIT`], 400 `bad_request` naming the problem (an
/// unknown field is named, since request types deny them).
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rej| {
            if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge { limit: BODY_LIMIT }
            } else {
                ApiError::BadRequest {
                    message: format!("could not read the request body: {}", rej.body_text()),
                }
            }
        })?;
        // Every request type is a JSON object. serde would also read a struct from a
        // JSON array (positionally), so `[]` would pass as "all fields absent".
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            return Err(ApiError::BadRequest {
                message: "the request body must be a JSON object, e.g. {\"text\": \"...\"}"
                    .to_owned(),
            });
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::BadRequest {
                message: format!("invalid request body: {e}"),
            })
    }
}

/// A request's query string, parsed into `T`. Unlike `axum::extract::Query`, a value
/// that does not parse (`?after=18446744073709551616`, `?stream=maybe`) answers 400
/// `bad_request` in the contract's JSON shape, naming the parameter, never plain text.
#[derive(Debug, Clone, Default)]
pub struct QueryArgs<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryArgs<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        axum::extract::Query::try_from_uri(&parts.uri)
            .map(|axum::extract::Query(q)| QueryArgs(q))
            .map_err(|rej| ApiError::BadQuery {
                message: rej.body_text(),
            })
    }
}
