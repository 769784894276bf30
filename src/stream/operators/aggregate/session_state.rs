//! A key's sessions in a checkpoint: the aggregate bin format (see
//! `aggregate_state`) with each session's start, end and flags as its
//! group key. Final sessions (markers) store fresh accumulators.

use super::calls::{new_accumulators, AggregateCall};
use super::session_aggregate::{Session, Sessions};
use super::state::{decode_bin, encode_groups};
use crate::error::{sqlstate, Result, WeirError};

const FINAL: u8 = 1;
const EMITTED: u8 = 2;

pub fn encode_sessions(sessions: &mut Sessions, calls: &[AggregateCall]) -> Result<Vec<u8>> {
    let mut markers = Vec::new();
    for session in sessions.values() {
        if session.accumulators.is_none() {
            markers.push(new_accumulators(calls)?);
        }
    }
    let mut markers = markers.iter_mut();
    let mut groups = Vec::with_capacity(sessions.len());
    for (start, session) in sessions.iter_mut() {
        let mut flags = if session.emitted { EMITTED } else { 0 };
        let accumulators = match session.accumulators.as_mut() {
            Some(accumulators) => accumulators,
            None => {
                flags |= FINAL;
                markers
                    .next()
                    .ok_or_else(|| WeirError::internal("session marker count"))?
            }
        };
        let mut key = start.to_be_bytes().to_vec();
        key.extend_from_slice(&session.end.to_be_bytes());
        key.push(flags);
        groups.push((key, accumulators.as_mut_slice()));
    }
    encode_groups(groups.into_iter(), calls)
}

pub fn decode_sessions(calls: &[AggregateCall], value: &[u8]) -> Result<Sessions> {
    let mut sessions = Sessions::new();
    for (key, accumulators) in decode_bin(calls, value)? {
        let malformed = || {
            WeirError::new(
                sqlstate::DATA_CORRUPTED,
                "a checkpointed session window is malformed",
            )
        };
        if key.len() != 17 {
            return Err(malformed());
        }
        let start = i64::from_be_bytes(key[0..8].try_into().map_err(|_| malformed())?);
        let end = i64::from_be_bytes(key[8..16].try_into().map_err(|_| malformed())?);
        let flags = key[16];
        sessions.insert(
            start,
            Session {
                end,
                filed_end: end,
                accumulators: (flags & FINAL == 0).then_some(accumulators),
                emitted: flags & EMITTED != 0,
                pending: Vec::new(),
            },
        );
    }
    Ok(sessions)
}
