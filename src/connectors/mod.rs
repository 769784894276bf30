//! Ways rows enter and leave weir other than INSERT and SELECT. Today: the
//! Postgres COPY text and CSV formats (`COPY t FROM STDIN`).

pub mod pg_copy;
