//! The PostgreSQL differential harness's parts (tests/postgres_differential.rs).

pub mod allow_list;
pub mod expressions;
pub mod outcome;
pub mod queries;
pub mod random;
