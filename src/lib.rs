//! weir: a streaming SQL database server speaking the Postgres wire protocol.
//!
//! Layout (see docs/architecture.md): `server` (pgwire only) → `session`
//! (per-connection state, statement execution) → `sql` (parsing) and `engine`
//! (DataFusion context, DDL, recovery) → `catalog` (durable definitions,
//! tables) → `state` (the only module that names sled). `connectors` holds
//! data formats that bring rows in. `bench` drives the engine in-process to
//! measure materialized-view throughput (`weir bench`).

pub mod auth;
pub mod bench;
pub mod catalog;
pub mod connectors;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod server;
pub mod session;
pub mod sql;
pub mod state;
pub mod stream;
#[cfg(test)]
pub mod testing;
