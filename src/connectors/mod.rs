//! Where rows enter and leave the dataflow: tables' durable logs (the
//! sources every write and COPY lands in), the connectors that feed
//! `CREATE SOURCE` relations (`source`), materialized views' stored
//! results, the connectors that ship a view's changes out (`sink`), and
//! the Postgres COPY text and CSV formats.

pub mod pg_copy;
pub mod sink;
pub mod source;
pub mod table;
pub mod view_result;
