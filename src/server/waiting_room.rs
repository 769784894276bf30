//! Sockets that have not logged in yet. They never take a logged-in slot
//! (engine::connections); they have a budget of their own, as many as
//! `--max-connections`, and when it is full the one that has waited
//! longest is closed to make room. So a flood of sockets that connect and
//! never log in cannot lock out a client that does: each newcomer evicts
//! the flood's oldest, and `--authentication-timeout-ms` ends the rest.
//! (Postgres refuses the newcomer instead, once about twice its
//! max_connections are waiting.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Default)]
pub struct WaitingRoom {
    state: Mutex<Room>,
}

#[derive(Default)]
struct Room {
    next_number: u64,
    /// By order of arrival: each one's eviction signal.
    waiting: BTreeMap<u64, Arc<Notify>>,
}

/// A socket's place in the room, given up when dropped (at login, or
/// when the connection ends).
pub struct Ticket {
    room: Arc<WaitingRoom>,
    number: u64,
}

impl WaitingRoom {
    fn room(&self) -> std::sync::MutexGuard<'_, Room> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A socket enters; past `limit` (0: none) the longest waiting is
    /// told to leave. `evicted` is notified when this one must.
    pub fn enter(self: &Arc<Self>, limit: u64, evicted: Arc<Notify>) -> Ticket {
        let mut room = self.room();
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        if limit > 0 && room.waiting.len() >= limit {
            if let Some((_, oldest)) = room.waiting.pop_first() {
                oldest.notify_one();
            }
        }
        let number = room.next_number;
        room.next_number += 1;
        room.waiting.insert(number, evicted);
        Ticket {
            room: self.clone(),
            number,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.room().waiting.len()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.room.room().waiting.remove(&self.number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_longest_waiting_makes_room() {
        let room = Arc::new(WaitingRoom::default());
        let signals: Vec<Arc<Notify>> = (0..3).map(|_| Arc::new(Notify::new())).collect();
        let first = room.enter(2, signals[0].clone());
        let second = room.enter(2, signals[1].clone());
        let _third = room.enter(2, signals[2].clone());
        assert_eq!(room.len(), 2);
        // The first was told to leave (a stored permit), the others not.
        tokio::time::timeout(std::time::Duration::from_secs(1), signals[0].notified())
            .await
            .unwrap();
        drop(second);
        assert_eq!(room.len(), 1);
        drop(first);
        assert_eq!(room.len(), 1, "an evicted ticket is already out");
    }

    #[test]
    fn no_limit_keeps_everyone() {
        let room = Arc::new(WaitingRoom::default());
        let tickets: Vec<Ticket> = (0..100)
            .map(|_| room.enter(0, Arc::new(Notify::new())))
            .collect();
        assert_eq!(room.len(), 100);
        drop(tickets);
        assert_eq!(room.len(), 0);
    }
}
