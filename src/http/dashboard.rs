//! The web dashboard: one page that reads `/jobs` and `/jobs/{name}` of the
//! same router and draws the job graph (coloured by backpressure), each
//! vertex's subtasks and channels, the checkpoint history and the failures,
//! with buttons for a savepoint, stop-with-savepoint and cancel.
//!
//! The assets are plain HTML, CSS and JavaScript compiled into the binary
//! (`include_str!`): nothing to build, nothing fetched at run time. They ask
//! for the API relative to the directory above `/dashboard/`, so the router
//! works nested under a prefix too.

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// The dashboard's routes: `/dashboard/` and its two assets; `/dashboard`
/// and `/` redirect there. Merged into [`super::router`].
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::temporary("dashboard/") }))
        .route(
            "/dashboard",
            get(|| async { Redirect::temporary("dashboard/") }),
        )
        .route(
            "/dashboard/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/dashboard/index.html",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/dashboard/dashboard.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/dashboard/dashboard.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The assets are compiled in: a new binary is a new dashboard.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
